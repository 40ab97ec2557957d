package postgres

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Migrations is the schema, for the migration tests.
var Migrations = migrations

// Migrate runs migrate on the store's pool.
func Migrate(ctx context.Context, s *Store, migs []string) error { return migrate(ctx, s.pool, migs) }

// Pool is the store's pool, for inspecting the schema.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }
