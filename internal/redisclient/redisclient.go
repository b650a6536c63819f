// Package redisclient opens the Redis client of every process from the
// two settings that name a deployment's Redis: its mode and its URL.
//
// A single server, a Redis Cluster and a primary watched by Sentinel are
// all reached through go-redis's UniversalClient, so the packages that keep
// state in Redis (breakers, token buckets, the idempotency cache) do not
// know which it is. What they must know is that on a cluster every key one
// Lua script touches has to be in one hash slot: see docs/OPERATIONS.md.
//
// The URL keeps go-redis's own forms:
//
//	single    redis://[user:password@]host:port/db
//	cluster   redis://[user:password@]host:port?addr=host2:port2&addr=host3:port3
//	sentinel  redis://[sentinel_user:sentinel_password@]sentinel1:26379/db?master_name=mymaster&addr=sentinel2:26379[&password=primary_password]
//
// (rediss:// for TLS), with go-redis's options such as dial_timeout in the
// query. A cluster's nodes are found from any one of them; the others in
// addr= are tried when the first does not answer. Sentinel mode asks the
// sentinels for the primary of master_name and follows it through a
// failover.
package redisclient

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The modes of redis.mode (env REDIS_MODE).
const (
	// Single is one Redis server (the default).
	Single = "single"
	// Cluster is a Redis Cluster.
	Cluster = "cluster"
	// Sentinel is a primary with replicas, found and failed over by
	// Redis Sentinel.
	Sentinel = "sentinel"
)

// clusterReloadInterval is how often a cluster client reads the cluster's
// slot map while it sends commands. go-redis reads it again at once on a
// MOVED or ASK reply, but a master that died answers nothing: its slots'
// commands fail until the next read finds the replica that took over, so
// the interval bounds how long a failover lasts for the client after the
// cluster has completed it (go-redis's default is a minute).
const clusterReloadInterval = 2 * time.Second

// ErrInvalid is returned (wrapped) for a mode and URL that cannot name a
// Redis deployment.
var ErrInvalid = errors.New("invalid redis setting")

// options is what a mode and URL parse to: exactly one field is set.
type options struct {
	single   *redis.Options
	cluster  *redis.ClusterOptions
	sentinel *redis.FailoverOptions
}

// Check reports whether mode and rawURL name a Redis deployment, as New
// would open it, without connecting to anything.
func Check(mode, rawURL string) error {
	_, err := parse(mode, rawURL)
	return err
}

// New returns the client of the Redis that mode and rawURL name. It does
// not connect: the first command does. Close it when done.
func New(mode, rawURL string) (redis.UniversalClient, error) {
	o, err := parse(mode, rawURL)
	if err != nil {
		return nil, err
	}
	switch {
	case o.cluster != nil:
		return redis.NewClusterClient(o.cluster), nil
	case o.sentinel != nil:
		return redis.NewFailoverClient(o.sentinel), nil
	default:
		return redis.NewClient(o.single), nil
	}
}

func parse(mode, rawURL string) (options, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return options{}, fmt.Errorf("%w: url: %v", ErrInvalid, err)
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return options{}, fmt.Errorf("%w: url must start with redis:// or rediss://", ErrInvalid)
	}
	if u.Host == "" {
		return options{}, fmt.Errorf("%w: url has no host", ErrInvalid)
	}
	q := u.Query()
	switch mode {
	case Single, "":
		return parseSingle(rawURL, q)
	case Cluster:
		return parseCluster(u, q)
	case Sentinel:
		return parseSentinel(rawURL, q)
	}
	return options{}, fmt.Errorf("%w: mode %q: must be %s, %s or %s", ErrInvalid, mode, Single, Cluster, Sentinel)
}

func parseSingle(rawURL string, q url.Values) (options, error) {
	switch {
	case q.Has("addr"):
		return options{}, fmt.Errorf("%w: url lists more nodes (addr=), which mode %s does not use: is mode %s or %s meant?", ErrInvalid, Single, Cluster, Sentinel)
	case q.Has("master_name"):
		return options{}, fmt.Errorf("%w: url names a sentinel master (master_name=), which mode %s does not use: is mode %s meant?", ErrInvalid, Single, Sentinel)
	}
	o, err := redis.ParseURL(rawURL)
	if err != nil {
		return options{}, fmt.Errorf("%w: url: %v", ErrInvalid, err)
	}
	return options{single: o}, nil
}

func parseCluster(u *url.URL, q url.Values) (options, error) {
	switch db := strings.Trim(u.Path, "/"); {
	case db != "" && db != "0":
		return options{}, fmt.Errorf("%w: url selects database %q, but a Redis Cluster has only database 0", ErrInvalid, db)
	case q.Has("db") && q.Get("db") != "0":
		return options{}, fmt.Errorf("%w: url selects database %q, but a Redis Cluster has only database 0", ErrInvalid, q.Get("db"))
	case q.Has("master_name"):
		return options{}, fmt.Errorf("%w: url names a sentinel master (master_name=), which mode %s does not use: is mode %s meant?", ErrInvalid, Cluster, Sentinel)
	}
	// ParseClusterURL reads neither the path nor db=.
	u2 := *u
	u2.Path = ""
	q.Del("db")
	u2.RawQuery = q.Encode()
	o, err := redis.ParseClusterURL(u2.String())
	if err != nil {
		return options{}, fmt.Errorf("%w: url: %v", ErrInvalid, err)
	}
	o.ClusterStateReloadInterval = clusterReloadInterval
	return options{cluster: o}, nil
}

func parseSentinel(rawURL string, q url.Values) (options, error) {
	if q.Get("master_name") == "" {
		return options{}, fmt.Errorf("%w: mode %s needs master_name=<name> in the url's query: the name the sentinels know the primary by", ErrInvalid, Sentinel)
	}
	o, err := redis.ParseFailoverURL(rawURL)
	if err != nil {
		return options{}, fmt.Errorf("%w: url: %v", ErrInvalid, err)
	}
	return options{sentinel: o}, nil
}
