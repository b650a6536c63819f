package db

import (
	"context"

	"github.com/golang-migrate/migrate/v4"
	pgxmigrate "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
)

// AnalyzeStaleAfter is AnalyzeStale with the age of a last analysis after
// which a table changed by 10 % is analyzed again given by the test.
var AnalyzeStaleAfter = analyzeStale

// MigrateTo applies the migrations up to version, as an older release did.
func MigrateTo(ctx context.Context, pool *pgxpool.Pool, version uint) error {
	sqlDB := stdlib.OpenDB(*pool.Config().ConnConfig)
	defer sqlDB.Close()
	driver, err := pgxmigrate.WithInstance(sqlDB, &pgxmigrate.Config{})
	if err != nil {
		return err
	}
	src, err := iofs.New(migrations, "migrations")
	if err != nil {
		return err
	}
	m, err := migrate.NewWithInstance("iofs", src, "pgx5", driver)
	if err != nil {
		return err
	}
	return m.Migrate(version)
}
