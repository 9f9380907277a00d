//! The DBSP peer of `cdcjoin bench`: the benchmark's join
//!
//! ```sql
//! SELECT u.id AS user_id, u.firstname, u.lastname, d.id AS domain_id, d.domain_name
//! FROM users u JOIN domains d ON d.user_id = u.id
//! ```
//!
//! as a DBSP circuit (Feldera's `dbsp` crate): both tables are upsert maps
//! keyed by their primary key (so Debezium's at-least-once redelivery is
//! absorbed), the domains are re-indexed by user_id and joined with the
//! users. It reads the same replay files as `cdcjoin replay` (one Kafka
//! record per line, `{"topic","partition","offset","key","value"}`, in
//! consumption order), feeds them in steps of `--step` records (one DBSP
//! transaction each) to `--workers` worker threads, and counts the output
//! changes of each step (accumulated over the transaction's steps and
//! gathered from every worker).
//!
//! Contract: prints one JSON object on stdout when done, e.g.
//! `{"job_seconds":4.2,"records":792726,"changes":1234567,"workers":2}`,
//! where `job_seconds` is the wall time from opening the first input file to
//! the end of the last step (parsing, feeding, all steps; the circuit is
//! built before). With `--out FILE` the final join is folded from the
//! changes and written there, one JSON object per row keyed by the select
//! names (the shape of `cdcjoin replay --final`), and `"rows"` is added.
//! With `--records-topic T` it is the three-table chain of `cdcjoin bench
//! --shape chain` instead: the u⋈d rows re-indexed by domain id and joined
//! with the dns_records (an upsert map too) re-indexed by domain_id (a NULL
//! domain_id matches nothing), selecting also `r.id AS record_id, r.rtype,
//! r.ttl`.
//!
//! Exits 2 on bad arguments, 1 on anything the peer cannot take (a
//! truncate, a TOAST placeholder, a record of another topic).

use std::borrow::Cow;
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::PathBuf;
use std::process::exit;
use std::time::Instant;

use dbsp::circuit::{
    CircuitConfig, CircuitStorageConfig, StorageCacheConfig, StorageConfig, StorageOptions,
};
use dbsp::operator::Update;
use dbsp::trace::BatchReader as _;
use dbsp::typed_batch::SpineSnapshot;
use dbsp::utils::{Tup2, Tup3, Tup4, Tup5, Tup8};
use dbsp::{BatchReader as _, IndexedZSetReader as _, MapHandle, OrdZSet, OutputHandle, Runtime};
use serde::Deserialize;
use serde_json::value::RawValue;

type UserRow = Tup2<Option<String>, Option<String>>; // firstname, lastname
type DomainRow = Tup2<i64, Option<String>>; // user_id, domain_name
type Joined = Tup5<i64, Option<String>, Option<String>, i64, Option<String>>;
type RecordRow = Tup3<Option<i64>, Option<String>, Option<i32>>; // domain_id, rtype, ttl
type Chained = Tup8<
    i64,
    Option<String>,
    Option<String>,
    i64,
    Option<String>,
    i64,
    Option<String>,
    Option<i32>,
>;
const CHAIN_NAMES: [&str; 3] = ["record_id", "rtype", "ttl"];

const NAMES: [&str; 5] = [
    "user_id",
    "firstname",
    "lastname",
    "domain_id",
    "domain_name",
];
const UNAVAILABLE: &str = "__debezium_unavailable_value";

struct Args {
    inputs: Vec<PathBuf>,
    parent_topic: String,
    child_topic: String,
    records_topic: Option<String>,
    workers: usize,
    step: usize,
    storage: Option<PathBuf>,
    min_storage_bytes: Option<usize>,
    out: Option<PathBuf>,
}

const USAGE: &str = "usage: cdcjoin-dbsp-peer --input FILE [--input FILE]... [--parent-topic T] [--child-topic T] [--records-topic T]
                         [--workers N] [--step N] [--storage DIR [--min-storage-bytes N]] [--out FILE]
  --input          replay files (JSON lines of Kafka records), read in the order given
  --records-topic  the three-table chain: dns_records joined to the domains on domain_id
  --workers        DBSP worker threads (default: the number of cores)
  --step           input records per DBSP transaction (default 10000)
  --storage        spill state to this directory (DBSP storage); without it state stays in memory
  --min-storage-bytes  batches at least this large go to storage (default: DBSP's)
  --out            write the final join here (folded from the changes)";

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        inputs: vec![],
        parent_topic: "dbserver1.public.users".into(),
        child_topic: "dbserver1.public.domains".into(),
        records_topic: None,
        workers: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        step: 10_000,
        storage: None,
        min_storage_bytes: None,
        out: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "-h" || flag == "--help" {
            return Err("help requested".into());
        }
        let v = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let num = |v: &str| v.parse::<usize>().map_err(|e| format!("{flag} {v}: {e}"));
        match flag.as_str() {
            "--input" => a.inputs.push(v.into()),
            "--parent-topic" => a.parent_topic = v,
            "--child-topic" => a.child_topic = v,
            "--records-topic" => a.records_topic = Some(v),
            "--workers" => a.workers = num(&v)?,
            "--step" => a.step = num(&v)?,
            "--storage" => a.storage = Some(v.into()),
            "--min-storage-bytes" => a.min_storage_bytes = Some(num(&v)?),
            "--out" => a.out = Some(v.into()),
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if a.inputs.is_empty() || a.workers == 0 || a.step == 0 {
        return Err("--input is required; --workers and --step must be >= 1".into());
    }
    Ok(a)
}

#[derive(Deserialize)]
struct Record<'a> {
    #[serde(borrow)]
    topic: Cow<'a, str>,
    #[serde(borrow)]
    key: Option<&'a RawValue>,
    #[serde(borrow)]
    value: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Wrapped<'a> {
    #[serde(borrow)]
    payload: &'a RawValue,
}

#[derive(Deserialize)]
struct Key {
    id: i64,
}

#[derive(Deserialize)]
struct UserEnvelope<'a> {
    #[serde(borrow)]
    op: Cow<'a, str>,
    after: Option<UserAfter>,
}

#[derive(Deserialize)]
struct UserAfter {
    firstname: Option<String>,
    lastname: Option<String>,
}

#[derive(Deserialize)]
struct DomainEnvelope<'a> {
    #[serde(borrow)]
    op: Cow<'a, str>,
    after: Option<DomainAfter>,
}

#[derive(Deserialize)]
struct DomainAfter {
    user_id: i64,
    domain_name: Option<String>,
}

#[derive(Deserialize)]
struct RecordEnvelope<'a> {
    #[serde(borrow)]
    op: Cow<'a, str>,
    after: Option<RecordAfter>,
}

#[derive(Deserialize)]
struct RecordAfter {
    domain_id: Option<i64>,
    rtype: Option<String>,
    ttl: Option<i32>,
}

/// The payload of a schemas-on `{"schema":…,"payload":…}` JSON, or raw.
fn payload(raw: &RawValue) -> Result<&str, String> {
    let s = raw.get();
    if s.starts_with("{\"schema\"") {
        let w: Wrapped = serde_json::from_str(s).map_err(|e| e.to_string())?;
        return Ok(w.payload.get());
    }
    Ok(s)
}

/// What one record does to its table: upsert or delete a key.
enum Change<V> {
    Upsert(i64, V),
    Delete(i64),
}

fn change<'a, E, V>(
    key: &RawValue,
    value: &'a str,
    parse: impl Fn(&'a str) -> Result<E, serde_json::Error>,
    split: impl Fn(E) -> (String, Option<V>),
) -> Result<Change<V>, String> {
    if value.contains(UNAVAILABLE) {
        return Err("a TOAST placeholder (__debezium_unavailable_value): generate the workload without them".into());
    }
    let env = parse(value).map_err(|e| format!("envelope: {e}"))?;
    let (op, after) = split(env);
    let id = serde_json::from_str::<Key>(payload(key)?)
        .map_err(|e| format!("key: {e}"))?
        .id;
    match (op.as_str(), after) {
        ("c" | "r" | "u", Some(v)) => Ok(Change::Upsert(id, v)),
        ("d", _) => Ok(Change::Delete(id)),
        ("t", _) => Err("a truncate (op=t)".into()),
        (op, _) => Err(format!("op {op:?} without an after image")),
    }
}

fn push<V: Clone>(batch: &mut Vec<Tup2<i64, Update<V, ()>>>, c: Change<V>)
where
    V: dbsp::DBData,
{
    match c {
        Change::Upsert(k, v) => batch.push(Tup2(k, Update::Insert(v))),
        Change::Delete(k) => batch.push(Tup2(k, Update::Delete)),
    }
}

struct Handles {
    users: MapHandle<i64, UserRow, ()>,
    domains: MapHandle<i64, DomainRow, ()>,
    records: MapHandle<i64, RecordRow, ()>,
    // out for the two-table join, chain for the three-table chain.
    out: Option<OutputHandle<SpineSnapshot<OrdZSet<Joined>>>>,
    chain: Option<OutputHandle<SpineSnapshot<OrdZSet<Chained>>>>,
}

fn run(a: Args) -> Result<String, String> {
    let mut config = CircuitConfig::from(a.workers);
    if let Some(dir) = &a.storage {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut options = StorageOptions::default();
        if a.min_storage_bytes.is_some() {
            options.min_storage_bytes = a.min_storage_bytes;
        }
        let storage = CircuitStorageConfig::for_config(
            StorageConfig {
                path: dir.to_string_lossy().into_owned(),
                cache: StorageCacheConfig::default(),
            },
            options,
        )
        .map_err(|e| format!("storage: {e}"))?;
        config = config.with_storage(Some(storage));
    }
    let chain = a.records_topic.is_some();
    let (mut dbsp, mut h) = Runtime::init_circuit(config, move |circuit| {
        let (users, users_h) = circuit.add_input_map::<i64, UserRow, (), _>(|_, _| {});
        let (domains, domains_h) = circuit.add_input_map::<i64, DomainRow, (), _>(|_, _| {});
        let (records, records_h) = circuit.add_input_map::<i64, RecordRow, (), _>(|_, _| {});
        let by_user =
            domains.map_index(|(id, Tup2(user_id, name))| (*user_id, Tup2(*id, name.clone())));
        let joined = by_user.join(
            &users,
            |user_id, Tup2(domain_id, name), Tup2(first, last)| {
                Tup5(
                    *user_id,
                    first.clone(),
                    last.clone(),
                    *domain_id,
                    name.clone(),
                )
            },
        );
        if !chain {
            return Ok(Handles {
                users: users_h,
                domains: domains_h,
                records: records_h,
                out: Some(joined.accumulate_output()),
                chain: None,
            });
        }
        let by_domain = joined.map_index(|Tup5(uid, first, last, did, name)| {
            (*did, Tup4(*uid, first.clone(), last.clone(), name.clone()))
        });
        let records_by_domain = records.flat_map_index(|(id, Tup3(did, rtype, ttl))| {
            did.map(|d| (d, Tup3(*id, rtype.clone(), *ttl)))
        });
        let chained = by_domain.join(
            &records_by_domain,
            |did, Tup4(uid, first, last, name), Tup3(rid, rtype, ttl)| {
                Tup8(
                    *uid,
                    first.clone(),
                    last.clone(),
                    *did,
                    name.clone(),
                    *rid,
                    rtype.clone(),
                    *ttl,
                )
            },
        );
        Ok(Handles {
            users: users_h,
            domains: domains_h,
            records: records_h,
            out: None,
            chain: Some(chained.accumulate_output()),
        })
    })
    .map_err(|e| format!("circuit: {e}"))?;

    let mut final_rows: Option<HashMap<Chained, i64>> = a.out.as_ref().map(|_| HashMap::new());
    let mut changes: i64 = 0;
    let mut records: u64 = 0;
    let mut users: Vec<Tup2<i64, Update<UserRow, ()>>> = Vec::with_capacity(a.step);
    let mut domains: Vec<Tup2<i64, Update<DomainRow, ()>>> = Vec::with_capacity(a.step);
    let mut records_batch: Vec<Tup2<i64, Update<RecordRow, ()>>> = Vec::new();
    let mut pending = 0usize;

    let start = Instant::now();
    let mut step =
        |users: &mut Vec<_>, domains: &mut Vec<_>, records: &mut Vec<_>, h: &mut Handles| -> Result<(), String> {
            h.users.append(users);
            h.domains.append(domains);
            h.records.append(records);
            dbsp.transaction().map_err(|e| format!("step: {e}"))?;
            match (final_rows.as_mut(), &h.out, &h.chain) {
                (None, Some(out), _) => changes += out.concat().inner().len() as i64,
                (None, None, Some(out)) => changes += out.concat().inner().len() as i64,
                (Some(rows), Some(out), _) => {
                    for (Tup5(u, f, l, d, n), (), w) in out.concat().consolidate().iter() {
                        changes += 1;
                        // Two tables: the chain's last three columns stay at their defaults.
                        *rows.entry(Tup8(u, f, l, d, n, 0, None, None)).or_insert(0) += w;
                    }
                }
                (Some(rows), None, Some(out)) => {
                    for (row, (), w) in out.concat().consolidate().iter() {
                        changes += 1;
                        *rows.entry(row).or_insert(0) += w;
                    }
                }
                (_, None, None) => unreachable!("the circuit has one output"),
            }
            Ok(())
        };
    for path in &a.inputs {
        let f = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut r = BufReader::with_capacity(1 << 20, f);
        let mut line = String::new();
        let mut n = 0u64;
        loop {
            line.clear();
            if r.read_line(&mut line)
                .map_err(|e| format!("{}: {e}", path.display()))?
                == 0
            {
                break;
            }
            n += 1;
            let at = |e: String| format!("{} line {n}: {e}", path.display());
            if line.trim().is_empty() {
                continue;
            }
            let rec: Record = serde_json::from_str(&line).map_err(|e| at(e.to_string()))?;
            records += 1;
            pending += 1;
            if let (Some(key), Some(value)) = (rec.key, rec.value) {
                let value = payload(value).map_err(at)?;
                if rec.topic == a.parent_topic {
                    let c = change(key, value, serde_json::from_str::<UserEnvelope>, |e| {
                        (
                            e.op.into_owned(),
                            e.after.map(|u| Tup2(u.firstname, u.lastname)),
                        )
                    })
                    .map_err(at)?;
                    push(&mut users, c);
                } else if rec.topic == a.child_topic {
                    let c = change(key, value, serde_json::from_str::<DomainEnvelope>, |e| {
                        (
                            e.op.into_owned(),
                            e.after.map(|d| Tup2(d.user_id, d.domain_name)),
                        )
                    })
                    .map_err(at)?;
                    push(&mut domains, c);
                } else if a.records_topic.as_deref() == Some(&*rec.topic) {
                    let c = change(key, value, serde_json::from_str::<RecordEnvelope>, |e| {
                        (
                            e.op.into_owned(),
                            e.after.map(|r| Tup3(r.domain_id, r.rtype, r.ttl)),
                        )
                    })
                    .map_err(at)?;
                    push(&mut records_batch, c);
                } else {
                    return Err(at(format!("record of topic {:?}", rec.topic)));
                }
            } else if rec.topic != a.parent_topic
                && rec.topic != a.child_topic
                && a.records_topic.as_deref() != Some(&*rec.topic)
            {
                return Err(at(format!("record of topic {:?}", rec.topic)));
            }
            // A tombstone (null value) changes nothing; it still counts as a record.
            if pending >= a.step {
                step(&mut users, &mut domains, &mut records_batch, &mut h)?;
                pending = 0;
            }
        }
    }
    if pending > 0 {
        step(&mut users, &mut domains, &mut records_batch, &mut h)?;
    }
    let job_seconds = start.elapsed().as_secs_f64();
    drop(step);
    dbsp.kill()
        .map_err(|_| "a DBSP worker panicked".to_string())?;

    let mut result = format!(
        "{{\"job_seconds\":{job_seconds},\"records\":{records},\"changes\":{changes},\"workers\":{}",
        a.workers
    );
    if let (Some(out), Some(rows)) = (&a.out, final_rows) {
        let n = write_final(out, rows, chain)?;
        result.push_str(&format!(",\"rows\":{n}"));
    }
    result.push('}');
    Ok(result)
}

/// Writes the rows of positive weight (repeated by weight) as JSON objects;
/// a negative weight is an error (a retraction of a row never emitted).
fn write_final(path: &PathBuf, rows: HashMap<Chained, i64>, chain: bool) -> Result<u64, String> {
    let f = File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut w = BufWriter::new(f);
    let mut n = 0u64;
    for (row, weight) in rows {
        if weight < 0 {
            return Err(format!("row {row:?} has weight {weight}"));
        }
        let Tup8(uid, first, last, did, name, rid, rtype, ttl) = row;
        let mut obj = serde_json::json!({
            NAMES[0]: uid, NAMES[1]: first, NAMES[2]: last, NAMES[3]: did, NAMES[4]: name,
        });
        if chain {
            let m = obj.as_object_mut().expect("an object");
            m.insert(CHAIN_NAMES[0].into(), rid.into());
            m.insert(CHAIN_NAMES[1].into(), rtype.into());
            m.insert(CHAIN_NAMES[2].into(), ttl.into());
        }
        for _ in 0..weight {
            writeln!(w, "{obj}").map_err(|e| e.to_string())?;
            n += 1;
        }
    }
    w.flush().map_err(|e| e.to_string())?;
    Ok(n)
}

fn main() {
    let a = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("cdcjoin-dbsp-peer: {e}\n{USAGE}");
            exit(2);
        }
    };
    match run(a) {
        Ok(line) => println!("{line}"),
        Err(e) => {
            eprintln!("cdcjoin-dbsp-peer: {e}");
            exit(1);
        }
    }
}
