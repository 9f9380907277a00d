package engine

// Durable commits without waiting for them (state.sync).
//
// With state.sync the engine does not have pebble fsync inside each commit
// (which would stop the engine for the length of an fsync per batch, tens
// of milliseconds on a busy disk): the store is opened without sync, and
// after each commit a goroutine of the engine's fsyncs the WAL while the
// next batch is being processed. The next Commit (and Close) waits for it
// first, so at most one commit is not yet durable at any time, and a
// commit is durable before the one after it completes. After an OS crash
// the last commit may be lost; state and positions roll back together and
// reprocessing emits the same rows with the same versions, as without
// state.sync. A sync error fails the next Commit.

// startSync starts fsyncing everything committed so far (state.sync).
func (e *Engine) startSync() {
	if !e.syncEach {
		return
	}
	done := make(chan error, 1)
	e.syncDone = done
	go func() { done <- e.store.SyncWAL() }() // owned by the engine: waited for by waitSync
}

// waitSync waits for the fsync in flight, if any, and returns its error.
func (e *Engine) waitSync() error {
	if e.syncDone == nil {
		return nil
	}
	err := <-e.syncDone
	e.syncDone = nil
	return err
}
