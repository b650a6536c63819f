package redisclient

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, mode, url string
		// want checks the options of a valid setting; err is a fragment
		// of the error of an invalid one.
		want func(t *testing.T, o options)
		err  string
	}{
		{name: "single", mode: Single, url: "redis://127.0.0.1:6379/3", want: func(t *testing.T, o options) {
			require.Equal(t, "127.0.0.1:6379", o.single.Addr)
			require.Equal(t, 3, o.single.DB)
		}},
		{name: "single is the empty mode", mode: "", url: "redis://h:6380/0", want: func(t *testing.T, o options) {
			require.Equal(t, "h:6380", o.single.Addr)
		}},
		{name: "single with password and options", mode: Single, url: "rediss://u:p@h:6380/1?dial_timeout=3s", want: func(t *testing.T, o options) {
			require.Equal(t, "u", o.single.Username)
			require.Equal(t, "p", o.single.Password)
			require.Equal(t, 3*time.Second, o.single.DialTimeout)
			require.NotNil(t, o.single.TLSConfig)
		}},
		{name: "single listing nodes", mode: Single, url: "redis://h:7000?addr=h:7001", err: "is mode cluster or sentinel meant?"},
		{name: "single naming a master", mode: Single, url: "redis://h:26379?master_name=m", err: "is mode sentinel meant?"},
		{name: "single with an unknown option", mode: Single, url: "redis://h:6379?colour=red", err: "unexpected option: colour"},
		{name: "single with a bad database", mode: Single, url: "redis://h:6379/x", err: "invalid database number"},

		{name: "cluster", mode: Cluster, url: "redis://h:7000?addr=h:7001&addr=h:7002", want: func(t *testing.T, o options) {
			require.Equal(t, []string{"h:7000", "h:7001", "h:7002"}, o.cluster.Addrs)
		}},
		{name: "cluster of one seed", mode: Cluster, url: "redis://u:p@h:7000", want: func(t *testing.T, o options) {
			require.Equal(t, []string{"h:7000"}, o.cluster.Addrs)
			require.Equal(t, "p", o.cluster.Password)
		}},
		{name: "cluster on database 0", mode: Cluster, url: "redis://h:7000/0?db=0&read_timeout=2s", want: func(t *testing.T, o options) {
			require.Equal(t, []string{"h:7000"}, o.cluster.Addrs)
			require.Equal(t, 2*time.Second, o.cluster.ReadTimeout)
		}},
		{name: "cluster on another database", mode: Cluster, url: "redis://h:7000/2", err: `database "2", but a Redis Cluster has only database 0`},
		{name: "cluster on another db=", mode: Cluster, url: "redis://h:7000?db=1", err: `database "1", but a Redis Cluster has only database 0`},
		{name: "cluster naming a master", mode: Cluster, url: "redis://h:7000?master_name=m", err: "is mode sentinel meant?"},
		{name: "cluster with a bad node", mode: Cluster, url: "redis://h:7000?addr=nohostport", err: "nohostport"},

		{name: "sentinel", mode: Sentinel, url: "redis://h:26379/2?master_name=mymaster&addr=h:26380&password=pw", want: func(t *testing.T, o options) {
			require.Equal(t, "mymaster", o.sentinel.MasterName)
			require.Equal(t, []string{"h:26379", "h:26380"}, o.sentinel.SentinelAddrs)
			require.Equal(t, 2, o.sentinel.DB)
			require.Equal(t, "pw", o.sentinel.Password)
		}},
		{name: "sentinel credentials", mode: Sentinel, url: "redis://su:sp@h:26379?master_name=m", want: func(t *testing.T, o options) {
			require.Equal(t, "su", o.sentinel.SentinelUsername)
			require.Equal(t, "sp", o.sentinel.SentinelPassword)
			require.Empty(t, o.sentinel.Password)
		}},
		{name: "sentinel without a master name", mode: Sentinel, url: "redis://h:26379?addr=h:26380", err: "needs master_name=<name>"},
		{name: "sentinel with an empty master name", mode: Sentinel, url: "redis://h:26379?master_name=", err: "needs master_name=<name>"},
		{name: "sentinel with an unknown option", mode: Sentinel, url: "redis://h:26379?master_name=m&colour=red", err: "unexpected option: colour"},

		{name: "unknown mode", mode: "replicated", url: "redis://h:6379", err: `mode "replicated": must be single, cluster or sentinel`},
		{name: "mode in capitals", mode: "Cluster", url: "redis://h:6379", err: `mode "Cluster"`},
		{name: "other scheme", mode: Single, url: "http://h:6379", err: "must start with redis:// or rediss://"},
		{name: "no host", mode: Cluster, url: "redis://", err: "has no host"},
		{name: "empty", mode: Single, url: "", err: "must start with redis://"},
		{name: "not a url", mode: Single, url: "redis://h:6379/%zz", err: "invalid URL escape"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o, err := parse(tc.mode, tc.url)
			if tc.err != "" {
				require.ErrorIs(t, err, ErrInvalid)
				require.ErrorContains(t, err, tc.err)
				require.Error(t, Check(tc.mode, tc.url))
				return
			}
			require.NoError(t, err)
			require.NoError(t, Check(tc.mode, tc.url))
			tc.want(t, o)
		})
	}
}

func TestNewReturnsTheClientOfTheMode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode, url string
		check     func(t *testing.T, c redis.UniversalClient)
	}{
		{Single, "redis://127.0.0.1:1/0", func(t *testing.T, c redis.UniversalClient) {
			cl, ok := c.(*redis.Client)
			require.True(t, ok, "%T", c)
			require.Equal(t, "127.0.0.1:1", cl.Options().Addr)
		}},
		{Cluster, "redis://127.0.0.1:1?addr=127.0.0.1:2", func(t *testing.T, c redis.UniversalClient) {
			cl, ok := c.(*redis.ClusterClient)
			require.True(t, ok, "%T", c)
			require.Equal(t, []string{"127.0.0.1:1", "127.0.0.1:2"}, cl.Options().Addrs)
			require.Equal(t, clusterReloadInterval, cl.Options().ClusterStateReloadInterval)
		}},
		{Sentinel, "redis://127.0.0.1:1?master_name=m", func(t *testing.T, c redis.UniversalClient) {
			cl, ok := c.(*redis.Client)
			require.True(t, ok, "%T", c)
			require.Equal(t, "FailoverClient", cl.Options().Addr)
		}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			c, err := New(tc.mode, tc.url)
			require.NoError(t, err)
			t.Cleanup(func() { _ = c.Close() })
			tc.check(t, c)
		})
	}
	_, err := New("ring", "redis://h:1")
	require.ErrorIs(t, err, ErrInvalid)
}
