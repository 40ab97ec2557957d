package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
)

// minFree is the free space below which the store counts as not
// writable: a small write may still fit in the write-ahead log's
// existing pages while a turn's events no longer do.
const minFree = 1 << 20

// Probe implements store.Prober: the file's filesystem has room
// (minFree), and a write transaction commits (it rewrites the database
// header's application_id with its own value: a page written, no data
// changed).
func (s *Store) Probe(ctx context.Context) error {
	if free, ok, err := freeBytes(filepath.Dir(s.path)); err != nil {
		return fmt.Errorf("probe %s: %w", s.path, err)
	} else if ok && free < minFree {
		return fmt.Errorf("probe %s: its filesystem is full: %d bytes free, under %d; free space in %s", s.path, free, minFree, filepath.Dir(s.path))
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var id int64
		if err := tx.QueryRowContext(ctx, `PRAGMA application_id`).Scan(&id); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, fmt.Sprintf(`PRAGMA application_id = %d`, id))
		return err
	})
	if err != nil {
		return fmt.Errorf("probe %s: write: %w", s.path, err)
	}
	return nil
}
