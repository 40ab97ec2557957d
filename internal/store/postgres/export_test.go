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

// CreateAt brings the database at url to only migs, then runs seed in
// it: a database a former runner left.
func CreateAt(ctx context.Context, url string, migs []string, seed string) error {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := migrate(ctx, pool, migs); err != nil {
		return err
	}
	_, err = pool.Exec(ctx, seed)
	return err
}
