// Package testservers starts the real local servers that the distributed
// backends are tested against (docs/DESIGN.md §10, docs/DISTRIBUTED.md): dynalite for
// DynamoDB and versitygw for S3. scripts/test-deps.sh installs both, pinned,
// into the repository's .cache directory.
//
// One server of each kind is started per test binary, on a free loopback
// port, the first time a test asks for it, and shared by every test of that
// binary: tests isolate themselves with their own table or bucket (see
// [Name]). The servers stop when the test binary exits: [Stop] stops them
// (call it from TestMain when there is one), and the kernel kills them if
// the binary dies first.
//
// # Missing servers
//
// When a server is not installed, a test that needs it is skipped with a
// message saying how to install it, unless $PROD_WRITE_REQUIRE_SERVERS is
// "1" (make test sets it after installing them), in which case it fails:
// CI never passes by silently skipping these tests. A server that is
// installed but does not start always fails the test.
//
// A skip is said loudly: when the test binary ends, [Main] (or [WrapM])
// prints a banner naming the package, how many tests were not run and how
// to run them. go test shows nothing of a passing package but its "ok"
// line unless -v is given, or no package is named, so the banner goes to
// the terminal (/dev/tty) as well as to stderr.
package testservers

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Pinned versions; scripts/test-deps.sh installs exactly these.
const (
	DynaliteVersion  = "4.0.0"
	VersityGWVersion = "v1.8.0"
)

// Region is the region the local servers are addressed in.
const Region = "us-east-1"

// RequireEnv names the variable that turns a missing server into a test
// failure instead of a skip.
const RequireEnv = "PROD_WRITE_REQUIRE_SERVERS"

type server struct {
	name     string
	cmd      *exec.Cmd
	endpoint string
	dir      string
	access   string
	secret   string
	done     chan struct{}
}

var (
	mu       sync.Mutex
	dynalite *server
	dynErr   error
	dynOnce  sync.Once
	s3gw     *server
	s3Err    error
	s3Once   sync.Once
	stopping bool

	// What absent skipped: the first reason, and how many tests.
	skipMu     sync.Mutex
	skipReason string
	skipCount  int
)

// Root returns the repository root: the directory of go.mod above this
// package's source.
func Root() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if ok {
		root := filepath.Dir(filepath.Dir(filepath.Dir(file)))
		if _, err := os.Stat(filepath.Join(root, "go.mod")); err == nil {
			return root, nil
		}
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		if filepath.Dir(dir) == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = filepath.Dir(dir)
	}
}

// binary finds an installed server: $env if set, else rel under the
// repository root.
func binary(env, rel string) (string, error) {
	if p := os.Getenv(env); p != "" {
		return p, nil
	}
	root, err := Root()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, rel), nil
}

// absent skips or fails t because what is not installed.
func absent(t testing.TB, what, path string) {
	t.Helper()
	msg := fmt.Sprintf("%s is not installed (looked for %s). Install the test servers with ./scripts/test-deps.sh "+
		"(dynalite %s from npm, versitygw %s and omniwitness %s with go install, all into .cache/)", what, path, DynaliteVersion, VersityGWVersion, OmniwitnessVersion)
	if os.Getenv(RequireEnv) == "1" {
		t.Fatalf("%s; %s=1, so this is a failure, not a skip", msg, RequireEnv)
	}
	skipMu.Lock()
	if skipCount == 0 {
		skipReason = msg
		// Opened while the test runs, so that go test counts it as an
		// input; [Report] rewrites it as the binary ends.
		touchSkipMarker(nil)
	}
	skipCount++
	skipMu.Unlock()
	t.Skipf("SKIPPED, NOT TESTED: %s", msg)
}

// touchSkipMarker writes .cache/testservers-skipped. go test caches no
// result that read a file of the module modified in the last two seconds:
// a run that skipped is run again next time, and says so again, rather
// than replayed as a bare "ok".
func touchSkipMarker(data []byte) {
	root, err := Root()
	if err != nil {
		return
	}
	dir := filepath.Join(root, ".cache")
	if os.MkdirAll(dir, 0o755) == nil {
		os.WriteFile(filepath.Join(dir, "testservers-skipped"), data, 0o644)
	}
}

// skipped returns how many tests of this binary were skipped because a
// server is not installed, and the first reason.
func skipped() (int, string) {
	skipMu.Lock()
	defer skipMu.Unlock()
	return skipCount, skipReason
}

// skipBanner is what [Report] prints when n tests of the package pkg were
// skipped for reason.
func skipBanner(pkg string, n int, reason string) string {
	return fmt.Sprintf("\n"+
		"*** SKIPPED, NOT TESTED: %d DynamoDB/S3/witness test(s) of %s ***\n"+
		"*** %s ***\n"+
		"*** Run them with: ./scripts/test-deps.sh && %s=1 go test %s (or make test) ***\n\n",
		n, pkg, reason, RequireEnv, pkg)
}

// Report prints a banner when tests of this binary were
// skipped for a missing server: to stderr, which go test shows with -v or
// when no package is named, and to the terminal, which it always reaches
// (go test keeps a passing package's output to itself otherwise).
func Report() {
	n, reason := skipped()
	if n == 0 {
		return
	}
	banner := skipBanner(testPackage(), n, reason)
	fmt.Fprint(os.Stderr, banner)
	if tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
		fmt.Fprint(tty, banner)
		tty.Close()
	}
	touchSkipMarker([]byte(banner))
}

// testPackage is the import path of the package under test, as its test
// binary records it ("…/pkg/store/dynamo.test"), or the binary's name.
func testPackage() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Path != "" {
		return "./" + strings.TrimPrefix(strings.TrimSuffix(bi.Path, ".test"), bi.Main.Path+"/") + "/"
	}
	return filepath.Base(os.Args[0])
}

// Dynalite returns the endpoint of a running dynalite (DynamoDB) server,
// starting it on first use.
func Dynalite(t testing.TB) string {
	t.Helper()
	bin, err := dynaliteBinary()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		absent(t, "dynalite "+DynaliteVersion, bin)
	}
	if _, err := exec.LookPath("node"); err != nil {
		absent(t, "node (needed by dynalite)", "node on $PATH")
	}
	endpoint, err := StartDynalite()
	if err != nil {
		t.Fatalf("starting dynalite: %v", err)
	}
	return endpoint
}

func dynaliteBinary() (string, error) {
	return binary("PROD_WRITE_DYNALITE", filepath.Join(".cache", "node_modules", ".bin", "dynalite"))
}

// StartDynalite is [Dynalite] outside a test (the benchmark): it starts
// dynalite on first use and returns its endpoint; [Stop] stops it.
func StartDynalite() (string, error) {
	bin, err := dynaliteBinary()
	if err != nil {
		return "", err
	}
	dynOnce.Do(func() {
		dynalite, dynErr = start("dynalite", func(dir string, port int) ([]string, error) {
			return []string{bin, "--host", "127.0.0.1", "--port", fmt.Sprint(port),
				"--createTableMs", "20", "--deleteTableMs", "20", "--updateTableMs", "20"}, nil
		}, nil, dynaliteReady)
	})
	if dynErr != nil {
		return "", dynErr
	}
	return dynalite.endpoint, nil
}

// S3 returns the endpoint and root credentials of a running versitygw (S3)
// server, posix backend with versioning, so buckets can have object lock;
// it is started on first use.
func S3(t testing.TB) (endpoint, accessKey, secretKey string) {
	t.Helper()
	bin, err := binary("PROD_WRITE_VERSITYGW", filepath.Join(".cache", "bin", "versitygw"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		absent(t, "versitygw "+VersityGWVersion, bin)
	}
	s3Once.Do(func() {
		access, secret := "PWTEST"+strings.ToUpper(randomHex(7)), randomHex(20)
		s3gw, s3Err = start("versitygw", func(dir string, port int) ([]string, error) {
			root, versions := filepath.Join(dir, "root"), filepath.Join(dir, "versions")
			for _, d := range []string{root, versions} {
				if err := os.MkdirAll(d, 0o700); err != nil {
					return nil, err
				}
			}
			// The root credentials go in its environment, not on
			// its command line, which any local user can read.
			return []string{bin, "--port", fmt.Sprintf("127.0.0.1:%d", port), "--region", Region,
				"--quiet", "--health", "/health",
				"posix", "--versioning-dir", versions, root}, nil
		}, []string{"ROOT_ACCESS_KEY_ID=" + access, "ROOT_SECRET_ACCESS_KEY=" + secret}, func(endpoint string) bool { return httpStatus(endpoint+"/health") == http.StatusOK })
		if s3gw != nil {
			s3gw.access, s3gw.secret = access, secret
		}
	})
	if s3Err != nil {
		t.Fatalf("starting versitygw: %v", s3Err)
	}
	return s3gw.endpoint, s3gw.access, s3gw.secret
}

func dynaliteReady(endpoint string) bool {
	// Any HTTP answer will do: an unsigned request gets a 400.
	return httpStatus(endpoint) != 0
}

func httpStatus(url string) int {
	c := &http.Client{Timeout: 500 * time.Millisecond}
	resp, err := c.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// start runs a server on a free loopback port in a new temporary
// directory and waits until ready says it answers. A port taken between
// choosing and binding it is retried with another.
func start(name string, argv func(dir string, port int) ([]string, error), env []string, ready func(endpoint string) bool) (*server, error) {
	var lastErr error
	for range 3 {
		s, err := startOnce(name, argv, env, ready)
		if err == nil {
			return s, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func startOnce(name string, argv func(dir string, port int) ([]string, error), env []string, ready func(endpoint string) bool) (*server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := tempDir(name)
	if err != nil {
		return nil, err
	}
	args, err := argv(dir, port)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}, env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group, so Stop reaches its children; and killed by
	// the kernel if this test binary dies without calling Stop.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &server{name: name, cmd: cmd, dir: dir, endpoint: fmt.Sprintf("http://127.0.0.1:%d", port), done: make(chan struct{})}
	go func() { cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(20 * time.Second)
	for !ready(s.endpoint) {
		select {
		case <-s.done:
			log, _ := os.ReadFile(logf.Name())
			os.RemoveAll(dir)
			return nil, fmt.Errorf("%s exited before answering: %s\n%s", name, cmd.ProcessState, tail(log))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.stop()
			log, _ := os.ReadFile(logf.Name())
			return nil, fmt.Errorf("%s did not answer on %s within 20s\n%s", name, s.endpoint, tail(log))
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if stopping {
		s.stop()
		return nil, errors.New("test binary is stopping its servers")
	}
	return s, nil
}

// tempDir makes a directory for this test binary under one base
// directory, first removing what binaries that died without [Stop] left
// there (their names start with their pid).
func tempDir(name string) (string, error) {
	base := filepath.Join(os.TempDir(), "prod-write-testservers")
	if err := os.MkdirAll(base, 0o700); err != nil {
		return "", err
	}
	entries, _ := os.ReadDir(base)
	for _, e := range entries {
		pid, _, _ := strings.Cut(e.Name(), "-")
		if n, err := strconv.Atoi(pid); err == nil && n != os.Getpid() && syscall.Kill(n, 0) == syscall.ESRCH {
			os.RemoveAll(filepath.Join(base, e.Name()))
		}
	}
	return os.MkdirTemp(base, fmt.Sprintf("%d-%s-", os.Getpid(), name))
}

func tail(b []byte) string {
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(bytes.TrimSpace(b))
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *server) stop() {
	if s == nil || s.cmd.Process == nil {
		return
	}
	syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(3 * time.Second):
		syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
	}
	os.RemoveAll(s.dir)
}

// Stop stops the servers this test binary started and removes what they
// and [Binary] left in temporary directories.
func Stop() {
	mu.Lock()
	stopping = true
	mu.Unlock()
	dynalite.stop()
	s3gw.stop()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
}

// Main runs m with [Stop] and [Report] after it; a TestMain of a package
// whose tests use the servers is:
//
//	func TestMain(m *testing.M) { testservers.Main(m) }
func Main(m *testing.M) {
	os.Exit(WrapM(m).Run())
}

// WrapM returns m with [Stop] and [Report] after its Run, for a TestMain
// that hands m on, as testscript.Main does.
func WrapM(m interface{ Run() int }) interface{ Run() int } { return wrapped{m} }

type wrapped struct{ m interface{ Run() int } }

func (w wrapped) Run() int {
	code := w.m.Run()
	Stop()
	Report()
	return code
}

// Name returns a fresh name for a table or bucket: lowercase, prefix
// followed by random hex, valid for both.
func Name(prefix string) string {
	return prefix + "-" + randomHex(6)
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// Env returns the environment variables that point the AWS SDK's standard
// chain at the local servers' credentials and region, and stop it from
// looking for an EC2 instance role. Tests that use dynalite alone get the
// versitygw credentials anyway: dynalite accepts any.
func Env(accessKey, secretKey string) []string {
	return []string{
		"AWS_ACCESS_KEY_ID=" + accessKey,
		"AWS_SECRET_ACCESS_KEY=" + secretKey,
		"AWS_REGION=" + Region,
		"AWS_EC2_METADATA_DISABLED=true",
		"AWS_CONFIG_FILE=" + os.DevNull,
		"AWS_SHARED_CREDENTIALS_FILE=" + os.DevNull,
	}
}

var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error
)

// Binary builds prod-write, prod-write-cli and prod-write-net once per
// test binary and
// returns prod-write's path.
func Binary(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		root, err := Root()
		if err != nil {
			binErr = err
			return
		}
		if binDir, binErr = tempDir("bin"); binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "prod-write")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		// The three binaries, side by side as installed: prod-write
		// hands every command but a run through the service to
		// prod-write-cli, which hands commands that need DynamoDB or S3
		// to prod-write-net.
		cmd := exec.CommandContext(ctx, "go", "build", "-o", binDir+"/", "./cmd/prod-write", "./cmd/prod-write-cli", "./cmd/prod-write-net")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build ./cmd/prod-write ./cmd/prod-write-cli ./cmd/prod-write-net: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}
