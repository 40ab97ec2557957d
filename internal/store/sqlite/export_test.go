package sqlite

import (
	"context"
	"database/sql"
)

// Migrations is the schema, for the migration tests.
var Migrations = migrations

// Migrate runs migrate on the store's write connection.
func Migrate(ctx context.Context, s *Store, migs []string) error { return migrate(ctx, s.w, migs) }

// DB is the store's write connection, for inspecting the schema.
func (s *Store) DB() *sql.DB { return s.w }

// CreateAt makes a database file at path with only migs applied, then
// runs seed in it: a database a former runner left.
func CreateAt(ctx context.Context, path string, migs []string, seed string) error {
	db, err := sql.Open("sqlite", dsn(path, []string{"foreign_keys(ON)"}))
	if err != nil {
		return err
	}
	defer db.Close()
	if err := migrate(ctx, db, migs); err != nil {
		return err
	}
	_, err = db.ExecContext(ctx, seed)
	return err
}
