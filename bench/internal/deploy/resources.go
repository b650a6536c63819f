package deploy

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// The local services, as the load programs find them.
const (
	adminURL  = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	redisURL  = "redis://127.0.0.1:6379/0"
	redisAddr = "127.0.0.1:6379"
)

// migrationRoles are the cluster-wide roles the first migration creates
// when they do not exist yet (internal/db/migrations).
var migrationRoles = []string{"hookline_api", "hookline_worker", "hookline_dlq"}

func vhostName(id string) string   { return strings.ReplaceAll(id, "_", "-") }
func redisPrefix(id string) string { return vhostName(id) + ":" }
func amqpURL(vhost string) string  { return "amqp://guest:guest@127.0.0.1:5672/" + vhost }

// createDatabase makes an empty database (the api migrates it) and
// returns its URL.
func createDatabase(ctx context.Context, name string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", fmt.Errorf("connect to postgres: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	return strings.Replace(adminURL, "/postgres?", "/"+name+"?", 1), nil
}

// dropDatabase drops name, disconnecting whoever is still connected.
func dropDatabase(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

// missingRoles returns the migration roles that do not exist yet: the
// ones this run will create, and so remove.
func missingRoles(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return nil, fmt.Errorf("connect to postgres: %w", err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT r FROM unnest($1::text[]) AS r WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r)`, migrationRoles)
	if err != nil {
		return nil, fmt.Errorf("list roles: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// dropRoles drops roles that this run's migration created. Postgres
// refuses to drop a role while any database holds grants to it, so a role
// that another database (another test or program running meanwhile) has
// come to use stays; that is not an error.
func dropRoles(roles []string) error {
	if len(roles) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("drop roles: %w", err)
	}
	defer conn.Close(context.Background())
	for _, r := range roles {
		_, _ = conn.Exec(ctx, "DROP ROLE IF EXISTS "+pgx.Identifier{r}.Sanitize())
	}
	return nil
}

// createVhost makes a vhost that guest may use fully.
func createVhost(ctx context.Context, name string) error {
	if err := rabbitmqctl(ctx, "add_vhost", name); err != nil {
		return err
	}
	if err := rabbitmqctl(ctx, "set_permissions", "-p", name, "guest", ".*", ".*", ".*"); err != nil {
		return errors.Join(err, deleteVhost(name))
	}
	return nil
}

// deleteVhost deletes name with every queue and exchange in it.
func deleteVhost(name string) error {
	return rabbitmqctl(context.Background(), "delete_vhost", name)
}

func rabbitmqctl(ctx context.Context, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "rabbitmqctl", append([]string{"-q"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("rabbitmqctl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// deleteRedisKeys removes every key under prefix, within a minute.
func deleteRedisKeys(prefix string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var batch []string
	for iter.Next(ctx) {
		if batch = append(batch, iter.Val()); len(batch) == 1000 {
			if err := rdb.Unlink(ctx, batch...).Err(); err != nil {
				return fmt.Errorf("delete redis keys %s*: %w", prefix, err)
			}
			batch = batch[:0]
		}
	}
	if err := iter.Err(); err != nil {
		return fmt.Errorf("scan redis keys %s*: %w", prefix, err)
	}
	if len(batch) > 0 {
		if err := rdb.Unlink(ctx, batch...).Err(); err != nil {
			return fmt.Errorf("delete redis keys %s*: %w", prefix, err)
		}
	}
	return nil
}
