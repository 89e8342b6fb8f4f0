package pebble

// Flush moves the memtable into an sstable, for tests that damage tables.
func (d *Device) Flush() error { return d.db.Flush() }
