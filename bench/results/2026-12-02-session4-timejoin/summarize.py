import json,sys,statistics as st
rows=[]
for r in sys.argv[1:]:
    d=json.load(open(f'{r}/report.json'))
    c={x['join']:x for x in d['cdcjoin']}
    fl=[p for p in d['peers'] if p['system'].startswith('Flink') and 'blackhole' in p['note']][0]
    fc=[p for p in d['peers'] if p['system'].startswith('Flink') and 'collect' in p['note']][0]
    ks=[p for p in d['peers'] if p['system'].startswith('Kafka')][0]
    same=all(p['same_rows'] for p in d['peers'])
    L,I=c['left'],c['inner']
    row=dict(round=r,load=d['machine'].rsplit('load ',1)[-1],date=d['date'],
      cl_wall=L['events_per_s'],cl_cpu=L['events_per_cpu_s'],ci_wall=I['events_per_s'],ci_cpu=I['events_per_cpu_s'],
      fl_wall=fl['events_per_s'],fl_cpu=fl['events']/fl['cpu_seconds'],ks_wall=ks['events_per_s'],ks_cpu=ks['events']/ks['cpu_seconds'],
      rows_left=L['rows'],rows_inner=I['rows'],fl_rows=fc['rows'],ks_rows=ks['rows'],same=same)
    row['flink_wall_x']=row['cl_wall']/row['fl_wall']; row['flink_cpu_x']=row['cl_cpu']/row['fl_cpu']
    row['ks_wall_x']=row['ci_wall']/row['ks_wall']; row['ks_cpu_x']=row['ci_cpu']/row['ks_cpu']
    rows.append(row)
keys=['cl_wall','cl_cpu','fl_wall','fl_cpu','flink_wall_x','flink_cpu_x','ci_wall','ci_cpu','ks_wall','ks_cpu','ks_wall_x','ks_cpu_x']
print('| round | start (UTC) | load | cdcjoin LEFT ev/s | per CPU-s | Flink LEFT ev/s | per CPU-s | × wall | × CPU | cdcjoin INNER ev/s | per CPU-s | KS INNER ev/s | per CPU-s | × wall | × CPU | rows L/I (Flink/KS) same |')
print('|'+'---|'*16)
for r in rows:
    print(f"| {r['round']} | {r['date'][11:19]} | {r['load']} | "+" | ".join(f"{r[k]:,.0f}" if not k.endswith('_x') else f"{r[k]:.1f}" for k in keys)+f" | {r['rows_left']}/{r['rows_inner']} ({r['fl_rows']}/{r['ks_rows']}) {r['same']} |")
print('| **median** | | | '+" | ".join(f"{st.median(r[k] for r in rows):,.0f}" if not k.endswith('_x') else f"**{st.median(r[k] for r in rows):.1f}**" for k in keys)+' | |')
