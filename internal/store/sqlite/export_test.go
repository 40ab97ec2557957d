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
