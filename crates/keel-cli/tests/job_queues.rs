//! Job-queue libraries with their own workers against a three-node cluster of `keel serve`
//! processes: RQ (PyPI `rq`), Celery (PyPI `celery`, its Redis broker and Redis result backend)
//! and BullMQ (npm `bullmq`). Each library's program is in `tests/apps/` (`rq_jobs.py`,
//! `celery_jobs.py`, `bullmq_jobs.js`, with `jobs_common.py`): it sends jobs through one node,
//! starts the library's workers (separate processes) connected to another node, and reads every
//! job's result back through the library; the jobs record each execution in files of their own,
//! outside Redis, so that lost and duplicated executions are counted apart from the library's
//! bookkeeping.
//!
//! Per library, each run on a fresh cluster:
//! - jobs sent through the leader, worked through a follower (RESP2);
//! - jobs sent through a follower, worked through the leader (RESP3 where the client speaks it:
//!   redis-py's `protocol=3`; BullMQ's ioredis speaks RESP2 only);
//! - the same, with the leader killed (SIGKILL) mid-way while its workers are busy: every client
//!   fails over to a surviving node, every job acknowledged before or after is done (but for
//!   Celery, whose broker pops a message with BRPOP before it keeps a copy: a pop whose reply went
//!   down with the leader loses its message, at most one per worker); duplicates are reported and
//!   bounded by what was in flight (the libraries run a job at least once around a failure), and
//!   none happen without one.
//!
//! Also what the libraries build on, between a leader and a follower: redis-py's `pubsub()`,
//! `Lock`, pipelines and `transaction()` in RESP2 and RESP3, and ioredis's pub/sub and blocking
//! pops (`redis_py_primitives.py`, `ioredis_primitives.js`).
//!
//! Needs python3 with pip, node and npm (scripts/test installs them from Debian); the libraries
//! are installed at test time into temporary directories (pip `--target`, npm), their major
//! versions pinned.

mod process;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

use process::{run_program, Cluster, TempDir};

/// How long one run may take, worker start-up and result polling included.
const RUN_DEADLINE: Duration = Duration::from_secs(150);

/// Jobs per run, and the job before which the leader is killed in the failover run (once a
/// few jobs ran: the workers are busy).
const JOBS: u64 = 120;
const KILL_BEFORE_JOB: u64 = 70;

/// Worker processes per run.
const WORKERS: u64 = 2;

/// One library's runs at a time in this test binary: their clusters and workers share the machine
/// with the other tests'.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn apps() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/apps")
}

/// `packages` from PyPI into a fresh directory, for PYTHONPATH.
fn pip_install(packages: &[&str]) -> TempDir {
    let dir = TempDir::new("pip");
    let target = dir.path().to_str().expect("a UTF-8 path").to_string();
    let mut args = vec![
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--no-warn-script-location",
        "--target",
        &target,
    ];
    args.extend_from_slice(packages);
    run_program("python3", &args, None);
    dir
}

/// `packages` from npm into a fresh directory, for NODE_PATH (its `node_modules`).
fn npm_install(packages: &[&str]) -> TempDir {
    let dir = TempDir::new("npm");
    let mut args = vec![
        "install",
        "--silent",
        "--no-audit",
        "--no-fund",
        "--no-save",
    ];
    args.extend_from_slice(packages);
    run_program("npm", &args, Some(dir.path()));
    dir
}

/// One library's program: how to start it.
struct App {
    library: &'static str,
    interpreter: &'static str,
    script: &'static str,
    /// An environment variable pointing at the installed packages.
    env: (&'static str, PathBuf),
    /// Whether the client can be asked for RESP3 (`--protocol 3`).
    resp3: bool,
    /// Jobs a worker process may hold at once (its concurrency and prefetch): what the leader's
    /// death may make run twice.
    in_flight: u64,
    /// Jobs the leader's death may lose: those taken by a pop whose reply was lost with the
    /// leader, where the library keeps no copy of what it pops (kombu's BRPOP, one per worker;
    /// RQ pops with BLMOVE into a list of its own, BullMQ moves jobs by script).
    lost_to_a_pop: u64,
}

/// The program's `SUMMARY key=value ...` line.
struct Summary(BTreeMap<String, String>);

impl Summary {
    fn parse(line: &str) -> Summary {
        Summary(
            line.split_whitespace()
                .skip(1)
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    fn count(&self, key: &str) -> u64 {
        self.0
            .get(key)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("SUMMARY lacks {key}: {:?}", self.0))
    }
}

/// A running program in its own process group (its workers are in it too): killed whole on drop,
/// however the test ends. Its stdout is read line by line; its stderr goes to a file.
struct Program {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    seen: Vec<String>,
    stderr: PathBuf,
}

impl Program {
    fn start(app: &App, args: &[String], dir: &Path) -> Program {
        let stderr = dir.join("stderr.log");
        let mut child = Command::new(app.interpreter)
            .arg(apps().join(app.script))
            .args(args)
            .env(app.env.0, &app.env.1)
            // No __pycache__ in the source tree.
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).expect("create the stderr file"))
            .spawn()
            .unwrap_or_else(|e| panic!("run {}: {e} (scripts/test installs it)", app.interpreter));
        let stdout = child.stdout.take().expect("piped stdout");
        let (send, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        Program {
            stdin: child.stdin.take(),
            child,
            lines,
            seen: Vec::new(),
            stderr,
        }
    }

    /// The first line starting with `prefix`, read within `deadline` of `since`.
    fn wait_for(&mut self, prefix: &str, since: Instant) -> String {
        loop {
            let left = RUN_DEADLINE.saturating_sub(since.elapsed());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.starts_with(prefix) {
                        return line;
                    }
                }
                Err(e) => panic!(
                    "no {prefix} line from the program ({e:?}); its output:\n{}\nits stderr \
                     (tail):\n{}",
                    self.seen.join("\n"),
                    process::log_tail(&self.stderr)
                ),
            }
        }
    }

    fn answer(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("piped stdin");
        writeln!(stdin, "{line}").expect("write to the program");
    }

    /// The summary, once the program has exited successfully.
    fn finish(mut self, since: Instant) -> Summary {
        let summary = Summary::parse(&self.wait_for("SUMMARY", since));
        let status = self.child.wait().expect("wait for the program");
        assert!(
            status.success(),
            "the program exited with {status}; its output:\n{}\nits stderr (tail):\n{}",
            self.seen.join("\n"),
            process::log_tail(&self.stderr)
        );
        summary
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        // The whole group: the program and the workers it started.
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill")
            .args(["-KILL", "--", &group])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.wait();
    }
}

/// `first`, then the other nodes: the order a client tries them in.
fn ports(cluster: &Cluster, first: u64) -> String {
    let mut ids = vec![first];
    ids.extend([1, 2, 3].into_iter().filter(|&id| id != first));
    ids.iter()
        .map(|&id| cluster.node(id).client_port.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// One run on a fresh cluster: jobs sent through the leader (or, with `from_follower`, a
/// follower) and worked through another node; with `kill`, workers on the leader, which is
/// killed before job [`KILL_BEFORE_JOB`] is sent.
fn run(app: &App, protocol: u8, from_follower: bool, kill: bool) -> Summary {
    let what = format!(
        "{}: RESP{protocol}, jobs sent through the {}{}",
        app.library,
        if from_follower { "follower" } else { "leader" },
        if kill {
            ", the leader killed mid-way"
        } else {
            ""
        }
    );
    let mut cluster = Cluster::new(app.library, &[1, 2, 3], &[], &[]);
    let leader = cluster.leader();
    let follower = [1, 2, 3].into_iter().find(|&id| id != leader).unwrap();
    let (enqueue, work) = if from_follower {
        (follower, leader)
    } else {
        (leader, follower)
    };
    let dir = TempDir::new("jobs");
    let mut args: Vec<String> = vec![
        "run".into(),
        "--enqueue".into(),
        ports(&cluster, enqueue),
        "--work".into(),
        ports(&cluster, work),
        "--jobs".into(),
        JOBS.to_string(),
        "--workers".into(),
        WORKERS.to_string(),
        "--dir".into(),
        dir.path().to_str().expect("a UTF-8 path").into(),
    ];
    if app.resp3 {
        args.extend(["--protocol".into(), protocol.to_string()]);
    }
    if kill {
        args.extend(["--pause-at".into(), KILL_BEFORE_JOB.to_string()]);
    }
    let started = Instant::now();
    let mut program = Program::start(app, &args, dir.path());
    if kill {
        let paused = program.wait_for("PAUSE", started);
        cluster.node_mut(leader).kill();
        eprintln!("{what}: node {leader} killed at {paused}");
        program.answer(&format!("node {leader} killed"));
    }
    let summary = program.finish(started);
    eprintln!(
        "{what}: {:?} in {:.1} s",
        summary.0,
        started.elapsed().as_secs_f64()
    );
    check(app, &what, &summary, kill);
    summary
}

/// What a run's summary must say: every job done with its result, but for what a failure may
/// lose (see [`App::lost_to_a_pop`]); duplicates only around a failure, within what was in flight.
fn check(app: &App, what: &str, summary: &Summary, kill: bool) {
    assert_eq!(summary.count("acknowledged"), JOBS, "{what}");
    assert_eq!(summary.count("wrong"), 0, "{what}: {:?}", summary.0);
    // Lost: never run, or its result never came. Only a pop whose reply went down with the
    // leader may lose a job, and only where the library pops without keeping a copy.
    let lost_bound = if kill { app.lost_to_a_pop } else { 0 };
    for lost in ["lost", "never_run"] {
        assert!(
            summary.count(lost) <= lost_bound,
            "{what}: {lost} more than {lost_bound}: {:?}",
            summary.0
        );
    }
    assert_eq!(
        summary.count("done") + summary.count("lost"),
        JOBS,
        "{what}"
    );
    let duplicates = summary.count("duplicates");
    let bound = if kill { WORKERS * app.in_flight } else { 0 };
    assert!(
        duplicates <= bound,
        "{what}: {duplicates} duplicate executions, more than {bound}"
    );
}

/// The three runs of one library.
fn runs(app: &App) {
    let _turn = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let protocol = if app.resp3 { 3 } else { 2 };
    run(app, 2, false, false);
    run(app, protocol, true, false);
    run(app, protocol, true, true);
}

/// A Python library's program, run with its packages (which speak RESP2 and RESP3: redis-py).
fn python_app(
    library: &'static str,
    script: &'static str,
    packages: &TempDir,
    (in_flight, lost_to_a_pop): (u64, u64),
) -> App {
    App {
        library,
        interpreter: "python3",
        script,
        env: ("PYTHONPATH", packages.path().to_path_buf()),
        resp3: true,
        in_flight,
        lost_to_a_pop,
    }
}

#[test]
fn rq_workers_run_every_job() {
    let packages = pip_install(&["rq>=2,<3", "redis>=5,<7"]);
    // One job at a time per worker (its work horse).
    runs(&python_app("rq", "rq_jobs.py", &packages, (1, 0)));
}

#[test]
fn celery_workers_run_every_task() {
    let packages = pip_install(&["celery[redis]>=5,<6"]);
    // Two pool processes, each with Celery's default prefetch of four messages; a worker's
    // BRPOP takes one message at a time.
    runs(&python_app(
        "celery",
        "celery_jobs.py",
        &packages,
        (8, WORKERS),
    ));
}

#[test]
fn bullmq_workers_run_every_job() {
    let packages = npm_install(&["bullmq@5"]);
    runs(&App {
        library: "bullmq",
        interpreter: "node",
        script: "bullmq_jobs.js",
        env: ("NODE_PATH", packages.path().join("node_modules")),
        resp3: false,
        // Each worker's concurrency.
        in_flight: 4,
        lost_to_a_pop: 0,
    });
}

/// Runs `script` (in `tests/apps/`) with the leader's and a follower's client ports; it prints
/// `ok_line` when every check passed.
fn primitives(interpreter: &str, script: &str, env: (&str, &Path), ok_line: &str) {
    let cluster = Cluster::new("primitives", &[1, 2, 3], &[], &[]);
    let leader = cluster.leader();
    let follower = [1, 2, 3].into_iter().find(|&id| id != leader).unwrap();
    let out = Command::new(interpreter)
        .arg(apps().join(script))
        .arg(cluster.node(leader).client_port.to_string())
        .arg(cluster.node(follower).client_port.to_string())
        .env(env.0, env.1)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap_or_else(|e| panic!("run {interpreter}: {e} (scripts/test installs it)"));
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success() && stdout.contains(ok_line),
        "{script}: {}\nstdout: {stdout}\nstderr: {stderr}",
        out.status
    );
}

/// redis-py's `pubsub()`, `Lock`, pipelines and `transaction()` between a leader and a follower,
/// RESP2 and RESP3 (`apps/redis_py_primitives.py`).
#[test]
fn redis_py_pubsub_lock_pipelines_and_transactions() {
    let packages = pip_install(&["redis>=5,<7"]);
    primitives(
        "python3",
        "redis_py_primitives.py",
        ("PYTHONPATH", packages.path()),
        "redis-py primitives ok",
    );
}

/// ioredis's pub/sub and blocking pops between a leader and a follower
/// (`apps/ioredis_primitives.js`).
#[test]
fn ioredis_pubsub_and_blocking_pops() {
    let packages = npm_install(&["ioredis@5"]);
    primitives(
        "node",
        "ioredis_primitives.js",
        ("NODE_PATH", &packages.path().join("node_modules")),
        "ioredis primitives ok",
    );
}
