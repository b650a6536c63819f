// Package dlqcli is the operator command line of the dlq binary. Through
// the api, with a tenant API key, it lists the dead-letter queue, retries
// one exhausted delivery or a filtered batch of them at a rate, recovers
// what a webhook failed or missed over a window, and reports, follows and
// cancels batch operations. Its Client is the typed
// client of those routes, for reuse by other tools.
package dlqcli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"
)

// Exit codes of Run.
const (
	exitOK          = 0
	exitFailure     = 1 // an api or connection error, or a followed batch that failed or was cancelled
	exitUsage       = 2
	exitInterrupted = 130
)

// Environment variables read by Run.
const (
	envAPIURL = "HOOKLINE_API_URL"
	envAPIKey = "HOOKLINE_API_KEY" //nolint:gosec // the variable's name, not a key
)

// defaultAPIURL is the api used when neither -api nor HOOKLINE_API_URL is
// given.
const defaultAPIURL = "http://127.0.0.1:8080"

// IsCommand reports whether name is an operator command (or a request for
// help), so that the dlq binary can tell one from the service's flags.
func IsCommand(name string) bool {
	switch name {
	case "list", "retry", "batch", "recover", "status", "cancel", "help", "-h", "-help", "--help":
		return true
	}
	return false
}

const usage = `usage: dlq [command] [flags] [args]

Without a command, or with "serve", dlq runs the dead-letter service
(flag -config FILE or env HOOKLINE_CONFIG).

Operator commands, through the api with a tenant API key:
  list    list dead-lettered deliveries, then their counts by failure category
  retry   retry one exhausted delivery as a new delivery
  batch   retry every exhausted delivery matching a filter, at a rate
  recover recover what a webhook failed or missed over a window, at a rate
  status  show a batch operation, or follow it to its end (-follow)
  cancel  cancel a batch operation
  help    show this help, or a command's: dlq help COMMAND

Environment:
  HOOKLINE_API_URL  api base URL (default http://127.0.0.1:8080); flag -api
  HOOKLINE_API_KEY  tenant API key; flag -key, but prefer the variable:
                    command lines show in process listings and shell history

Exit status: 0 on success; 1 on an api or connection error, or when a
followed batch operation failed or was cancelled; 2 on a usage error;
130 when interrupted.
`

// app is one run of the command line.
type app struct {
	stdout, stderr io.Writer
	getenv         func(string) string
	// poll is the interval between two reads of a followed batch.
	poll time.Duration
	// tty redraws progress in place instead of printing a line per change.
	tty bool
}

// Run runs the operator command in args (args[0] is the command name)
// and returns the process exit code. It reads HOOKLINE_API_URL and
// HOOKLINE_API_KEY through getenv.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	a := &app{stdout: stdout, stderr: stderr, getenv: getenv, poll: time.Second, tty: isTerminal(stdout)}
	return a.run(ctx, args)
}

func (a *app) run(ctx context.Context, args []string) int {
	if len(args) == 0 {
		fmt.Fprint(a.stderr, usage)
		return exitUsage
	}
	switch name := args[0]; name {
	case "help", "-h", "-help", "--help":
		return a.help(ctx, args[1:])
	default:
		if cmd := a.commands()[name]; cmd != nil {
			return cmd(ctx, args[1:])
		}
		fmt.Fprintf(a.stderr, "dlq: unknown command %q\n\n%s", name, usage)
		return exitUsage
	}
}

func (a *app) commands() map[string]func(context.Context, []string) int {
	return map[string]func(context.Context, []string) int{
		"list":    a.list,
		"retry":   a.retry,
		"batch":   a.batch,
		"recover": a.recover,
		"status":  a.status,
		"cancel":  a.cancel,
	}
}

// help prints the usage, or a command's, on stdout.
func (a *app) help(ctx context.Context, args []string) int {
	if len(args) == 0 {
		fmt.Fprint(a.stdout, usage)
		return exitOK
	}
	h := *a
	h.stderr = a.stdout
	cmd := h.commands()[args[0]]
	if cmd == nil {
		fmt.Fprintf(a.stderr, "dlq: unknown command %q\n\n%s", args[0], usage)
		return exitUsage
	}
	return cmd(ctx, []string{"-h"})
}

// command is the flag set of one operator command with the flags they all
// share.
type command struct {
	fs   *flag.FlagSet
	api  string
	key  string
	args string
}

func (a *app) newCommand(name, args, summary string) *command {
	c := &command{fs: flag.NewFlagSet("dlq "+name, flag.ContinueOnError), args: args}
	c.fs.SetOutput(a.stderr)
	api := a.getenv(envAPIURL)
	if api == "" {
		api = defaultAPIURL
	}
	c.fs.StringVar(&c.api, "api", api, "api base `URL` (env "+envAPIURL+")")
	// No default shown: the key must never be printed.
	c.fs.StringVar(&c.key, "key", "", "tenant API `key` (prefer env "+envAPIKey+")")
	c.fs.Usage = func() {
		fmt.Fprintf(c.fs.Output(), "usage: dlq %s %s\n\n%s\n\nFlags:\n", name, args, summary)
		c.fs.PrintDefaults()
	}
	return c
}

// parse parses args and checks that they hold exactly npos positional
// arguments. When it returns ok false, code is the exit code.
func (a *app) parse(c *command, args []string, npos int) (pos []string, code int, ok bool) {
	pos, err := parseArgs(c.fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return nil, exitOK, false
	}
	if err != nil { // the flag package has printed it with the usage
		return nil, exitUsage, false
	}
	if len(pos) != npos {
		return nil, a.usageFailure(c, usagef("want %d argument(s) (%s), got %d", npos, c.args, len(pos))), false
	}
	return pos, exitOK, true
}

// client makes the api client from -api and the key (-key, else
// HOOKLINE_API_KEY).
func (a *app) client(c *command) (*Client, error) {
	key := c.key
	if key == "" {
		key = a.getenv(envAPIKey)
	}
	if key == "" {
		return nil, usagef("no API key: set %s", envAPIKey)
	}
	cl, err := NewClient(c.api, key, nil)
	if err != nil {
		return nil, usagef("%v", err)
	}
	return cl, nil
}

// usageFailure prints a usage error with the command's usage.
func (a *app) usageFailure(c *command, err error) int {
	fmt.Fprintf(a.stderr, "%s: %v\n", c.fs.Name(), err)
	c.fs.Usage()
	return exitUsage
}

// fail prints err and returns its exit code.
func (a *app) fail(c *command, err error) int {
	var uerr *usageError
	switch {
	case errors.As(err, &uerr):
		return a.usageFailure(c, err)
	case errors.Is(err, context.Canceled):
		fmt.Fprintln(a.stderr, "dlq: interrupted")
		return exitInterrupted
	}
	fmt.Fprintln(a.stderr, "dlq:", err)
	return exitFailure
}

// isTerminal reports whether w is a character device such as a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
