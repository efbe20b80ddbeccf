//! Redis's own test suite (Redis 7.0.15, vendored unchanged in `vendor/redis-tests`) in its
//! external-server mode, unit by unit, against redis-server (the baseline: it shows the harness
//! works and which tests a unit holds) and against a three-node keel cluster (three `keel serve`
//! processes) through the leader's client port and through a follower's.
//!
//! The suite's output is parsed per test; a unit that stops early counts the tests it did not
//! run as failed. `vendor/redis-tests/keel-passing.txt` is the ratchet: every test listed there
//! (per unit and port role) must pass against keel, or this test fails. `KEEL_REDIS_SUITE_BLESS=1`
//! rewrites it from the run instead. `vendor/redis-tests/keel-skiplist.txt` names the tests that
//! cannot apply to a consensus-replicated server, each with its reason; they are skipped on every
//! target. `KEEL_REDIS_SUITE_UNITS="expire multi"` runs only some units (the ratchet is then
//! checked, and blessed, for those units only). A per-unit table is always printed (`--nocapture`
//! to see it when the test passes; `scripts/redis-suite` does that).

mod process;
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::fs;
use std::io::Write as _;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use process::{free_port, Cluster, TempDir};
use support::{on_path, RedisServer};

/// The units run, in the suite's own names.
const UNITS: &[&str] = &[
    "type/string",
    "type/incr",
    "expire",
    "keyspace",
    "multi",
    "protocol",
    "introspection",
    "sort",
    "type/list",
    "type/list-2",
    "type/list-3",
    "type/stream",
    "type/stream-cgroups",
    "pubsub",
];

/// The suite's options for a server that is not one it started: one database (until the units
/// are blessed again in database 9, where the suite's clients select), no checks of Redis's
/// internal encodings or of `DEBUG DIGEST`, and none of the tests that need replication,
/// `DEBUG`, `SAVE` or eviction settings. `--durable` makes an error inside a test fail that test
/// rather than end the unit, so one missing command does not hide every test after it.
const SUITE_OPTIONS: &[&str] = &[
    "--singledb",
    "--ignore-encoding",
    "--ignore-digest",
    "--durable",
    "--tags",
    "-needs:repl",
    "--tags",
    "-needs:debug",
    "--tags",
    "-needs:save",
    "--tags",
    "-needs:config-maxmemory",
];

/// The suite gives up on a unit when its test client reports nothing for this long (a test
/// waiting for a reply that never comes: its client library has no read timeout).
const SUITE_SILENCE_TIMEOUT_S: u64 = 120;

/// A unit still running after this long is killed (with its test client) and reported as stopped.
const UNIT_DEADLINE: Duration = Duration::from_secs(600);

fn vendored_suite() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../vendor/redis-tests")
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Target {
    Redis,
    Leader,
    Follower,
}

impl Target {
    /// The port role as `keel-passing.txt` spells it.
    fn role(self) -> &'static str {
        match self {
            Target::Redis => "redis-server",
            Target::Leader => "leader",
            Target::Follower => "follower",
        }
    }

    fn heading(self) -> &'static str {
        match self {
            Target::Redis => "redis-server",
            Target::Leader => "keel leader",
            Target::Follower => "keel follower",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SuiteResult {
    Passed,
    Failed,
    Skipped,
    /// The baseline ran it; this run ended (or abandoned a group of tests) before reaching it.
    NotRun,
}

/// What one run of one unit reported.
#[derive(Debug, Default)]
struct UnitRun {
    /// Per test name (a name the unit uses twice passes only if both passed).
    outcomes: BTreeMap<String, SuiteResult>,
    /// `[ignore]` lines: tests, or groups of tests, that the tag filters and external mode leave
    /// out (a skip-list entry is an outcome: `[skip]` names its test).
    ignored: usize,
    /// The suite's message for each failed test, to show when a listed test fails.
    failures: BTreeMap<String, String>,
    /// Why the unit did not run to its end, or abandoned some of its tests.
    stopped: Vec<String>,
    /// The suite started the unit (its test client loaded it).
    started: bool,
    /// The suite reported the unit done.
    finished: bool,
    elapsed: Duration,
}

impl UnitRun {
    /// Whether a test failed because the cluster had no leader at that moment.
    fn lost_its_leader(&self) -> bool {
        self.failures
            .values()
            .any(|why| why.contains("TRYAGAIN no leader"))
    }

    fn count(&self, outcome: SuiteResult) -> usize {
        self.outcomes.values().filter(|o| **o == outcome).count()
    }

    fn passed(&self) -> usize {
        self.count(SuiteResult::Passed)
    }

    fn failed(&self) -> usize {
        self.count(SuiteResult::Failed) + self.count(SuiteResult::NotRun)
    }

    fn skipped(&self) -> usize {
        self.count(SuiteResult::Skipped) + self.ignored
    }

    fn record(&mut self, name: &str, outcome: SuiteResult) {
        let merged = match (self.outcomes.get(name), outcome) {
            (None, new) => new,
            (Some(SuiteResult::Failed), _) | (_, SuiteResult::Failed) => SuiteResult::Failed,
            (Some(SuiteResult::Passed), _) | (_, SuiteResult::Passed) => SuiteResult::Passed,
            (Some(old), _) => *old,
        };
        self.outcomes.insert(name.to_string(), merged);
    }

    /// Counts every test `baseline` ran that this run never reported as not run, so a unit that
    /// stops early cannot look better than one that fails.
    fn add_not_run(&mut self, baseline: &UnitRun) {
        for (name, outcome) in &baseline.outcomes {
            if *outcome != SuiteResult::Skipped {
                self.outcomes
                    .entry(name.clone())
                    .or_insert(SuiteResult::NotRun);
            }
        }
    }
}

fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // An SGR sequence: ESC [ ... m.
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Parses the output of `runtest --single unit/<unit>` (see `read_from_test_client` in
/// `tests/test_helper.tcl` for the line formats).
fn parse_suite_output(unit: &str, output: &str) -> UnitRun {
    let mut run = UnitRun::default();
    // An error inside a test is reported as "<name> in tests/unit/<unit>.tcl" and its message
    // lines; one without that suffix came from a group's own code, which stopped that group.
    let test_file_suffix = format!(" in tests/unit/{unit}.tcl");
    let mut failure: Option<(String, String)> = None;
    for raw in output.lines() {
        let line = strip_ansi(raw);
        let tagged = |tag: &str| line.strip_prefix(&format!("[{tag}]: ")).map(str::to_string);
        let is_status_line = line.starts_with('[') || line.starts_with("Testing ");
        if let Some((_, message)) = failure.as_mut().filter(|_| !is_status_line) {
            if message.lines().count() < 12 {
                message.push_str(&line);
                message.push('\n');
            }
            continue;
        }
        if let Some((name, message)) = failure.take() {
            run.failures.insert(name, message);
        }
        if line == format!("Testing unit/{unit}") {
            run.started = true;
        } else if let Some(rest) = tagged("ok") {
            let name = rest
                .rsplit_once(" (")
                .filter(|(_, t)| t.ends_with(" ms)"))
                .map_or(rest.as_str(), |(name, _)| name);
            run.record(name, SuiteResult::Passed);
        } else if let Some(rest) = tagged("err") {
            match rest.strip_suffix(&test_file_suffix) {
                Some(name) => {
                    run.record(name, SuiteResult::Failed);
                    failure = Some((name.to_string(), String::new()));
                }
                None => run
                    .stopped
                    .push(format!("a group of tests stopped: {rest}")),
            }
        } else if let Some(name) = tagged("skip") {
            run.record(&name, SuiteResult::Skipped);
        } else if tagged("ignore").is_some() {
            run.ignored += 1;
        } else if let Some(rest) = tagged("exception") {
            run.stopped.push(format!("exception: {rest}"));
        } else if line.starts_with("[TIMEOUT]") {
            run.stopped.push(format!(
                "the suite's timeout: no progress for {SUITE_SILENCE_TIMEOUT_S} s"
            ));
        } else if line.contains(" done]: unit/") && line.contains(&format!("unit/{unit} (")) {
            run.finished = true;
        }
    }
    if let Some((name, message)) = failure {
        run.failures.insert(name, message);
    }
    if run.started && !run.finished && run.stopped.is_empty() {
        run.stopped
            .push("the suite ended without finishing the unit".to_string());
    }
    run
}

/// Copies the vendored suite into `into` (the suite writes under its own `tests/tmp`).
fn copy_tree(from: &Path, into: &Path) {
    fs::create_dir_all(into).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = into.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// The suite's copy and the skip file passed to it, for one target.
struct Suite {
    dir: TempDir,
    skipfile: PathBuf,
}

impl Suite {
    fn new(target: Target, skipped_tests: &[String]) -> Suite {
        let dir = TempDir::new(&format!("redis-suite-{}", target.role()));
        copy_tree(&vendored_suite(), dir.path());
        let skipfile = dir.path().join("skipfile.txt");
        fs::write(&skipfile, skipped_tests.join("\n")).unwrap();
        Suite { dir, skipfile }
    }

    /// Runs one unit against `port`; never hangs longer than [`UNIT_DEADLINE`].
    fn run_unit(&self, unit: &str, port: u16) -> UnitRun {
        let output_path = self
            .dir
            .path()
            .join(format!("{}.out", unit.replace('/', "_")));
        let output = fs::File::create(&output_path).unwrap();
        // The suite's own test server listens on a port in [baseport - 32, baseport); a free one
        // keeps concurrent runs on this machine apart.
        let baseport = free_port() + 32;
        let start = Instant::now();
        let mut child = Command::new("tclsh")
            .arg("tests/test_helper.tcl")
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(SUITE_OPTIONS)
            .args(["--timeout", &SUITE_SILENCE_TIMEOUT_S.to_string()])
            .args(["--baseport", &baseport.to_string()])
            .arg("--skipfile")
            .arg(&self.skipfile)
            .args(["--single", &format!("unit/{unit}")])
            .current_dir(self.dir.path())
            // Plain output: the suite colours its status words on xterm-like terminals.
            .env("TERM", "dumb")
            .stdin(Stdio::null())
            .stdout(output.try_clone().unwrap())
            .stderr(output)
            // Its own process group: the test server starts its test client as another
            // process, and a unit that overruns is killed with both.
            .process_group(0)
            .spawn()
            .expect("start tclsh");
        let group = child.id();
        let exited = process::poll_within(UNIT_DEADLINE, || child.try_wait().unwrap());
        // Also ends a test client the test server left behind.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{group}")])
            .stderr(Stdio::null())
            .status();
        let _ = child.wait();
        let text = String::from_utf8_lossy(&fs::read(&output_path).unwrap()).into_owned();
        let mut run = parse_suite_output(unit, &text);
        run.elapsed = start.elapsed();
        if exited.is_none() {
            run.stopped.push(format!(
                "killed after {} s (still running)",
                UNIT_DEADLINE.as_secs()
            ));
        }
        assert!(
            run.started,
            "the suite did not start unit/{unit} against port {port}; its output:\n{text}"
        );
        run
    }
}

/// The tests named in `keel-skiplist.txt`: every line that is neither empty nor a `#` comment.
fn skip_list() -> Vec<String> {
    let path = vendored_suite().join("keel-skiplist.txt");
    fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect()
}

/// One line of `keel-passing.txt`: unit, port role, test name.
type Listed = (String, String, String);

fn passing_list_path() -> PathBuf {
    vendored_suite().join("keel-passing.txt")
}

fn read_passing_list() -> BTreeSet<Listed> {
    let path = passing_list_path();
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let mut fields = l.splitn(3, '\t');
            let mut next = || {
                fields
                    .next()
                    .unwrap_or_else(|| {
                        panic!("{}: not unit<TAB>role<TAB>name: {l:?}", path.display())
                    })
                    .to_string()
            };
            (next(), next(), next())
        })
        .collect()
}

const PASSING_LIST_HEADER: &str = "\
# Tests of Redis's own suite known to pass against keel: unit, the port they ran against
# (leader or follower) and the test's name, tab-separated. crates/keel-cli/tests/redis_suite.rs
# fails if one of them does not pass; KEEL_REDIS_SUITE_BLESS=1 rewrites this file from a run.
";

/// Rewrites the list from this run: lines of the units not run are kept.
fn bless(listed: &BTreeSet<Listed>, runs: &BTreeMap<(Target, &str), UnitRun>, units: &[&str]) {
    let mut passing: BTreeSet<Listed> = listed
        .iter()
        .filter(|(unit, _, _)| !units.contains(&unit.as_str()))
        .cloned()
        .collect();
    for ((target, unit), run) in runs {
        if *target == Target::Redis {
            continue;
        }
        for (name, outcome) in &run.outcomes {
            if *outcome == SuiteResult::Passed {
                passing.insert((unit.to_string(), target.role().to_string(), name.clone()));
            }
        }
    }
    let mut text = PASSING_LIST_HEADER.to_string();
    for (unit, role, name) in &passing {
        writeln!(text, "{unit}\t{role}\t{name}").unwrap();
    }
    fs::write(passing_list_path(), text).unwrap();
    report(&format!(
        "KEEL_REDIS_SUITE_BLESS: wrote {} tests to vendor/redis-tests/keel-passing.txt\n",
        passing.len()
    ));
}

/// Written past the test harness's capture, so every run's log shows it, passing or not.
fn report(text: &str) {
    let _ = std::io::stderr().write_all(text.as_bytes());
}

fn cell(run: &UnitRun) -> String {
    let mark = if run.stopped.is_empty() { "" } else { " *" };
    format!("{}/{}/{}{mark}", run.passed(), run.failed(), run.skipped())
}

/// The per-unit table: passed/failed/skipped for each target, `*` where a run stopped early
/// (explained below the table).
fn table(runs: &BTreeMap<(Target, &str), UnitRun>, units: &[&str], targets: &[Target]) -> String {
    let mut out = String::new();
    writeln!(
        out,
        "Redis 7.0.15 test suite, external mode: passed/failed/skipped per unit \
         (failed includes tests not run; * stopped early)"
    )
    .unwrap();
    write!(out, "{:<16}", "unit").unwrap();
    for target in targets {
        write!(out, "{:>18}", target.heading()).unwrap();
    }
    out.push('\n');
    let mut totals: BTreeMap<Target, (usize, usize, usize)> = BTreeMap::new();
    for unit in units {
        write!(out, "{unit:<16}").unwrap();
        for target in targets {
            let run = &runs[&(*target, *unit)];
            write!(out, "{:>18}", cell(run)).unwrap();
            let total = totals.entry(*target).or_default();
            total.0 += run.passed();
            total.1 += run.failed();
            total.2 += run.skipped();
        }
        out.push('\n');
    }
    write!(out, "{:<16}", "total").unwrap();
    for target in targets {
        let (passed, failed, skipped) = totals[target];
        write!(out, "{:>18}", format!("{passed}/{failed}/{skipped}")).unwrap();
    }
    out.push('\n');
    // The same reason is told once, with every run it stopped.
    let mut stopped_runs: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for ((target, unit), run) in runs {
        for reason in &run.stopped {
            let first_line = reason.lines().next().unwrap_or_default();
            stopped_runs
                .entry(first_line)
                .or_default()
                .push(format!("{unit} on {}", target.heading()));
        }
    }
    for (reason, stopped) in stopped_runs {
        writeln!(out, "* {reason}\n    ({})", stopped.join(", ")).unwrap();
    }
    writeln!(
        out,
        "seconds per unit: {}",
        targets
            .iter()
            .map(|t| t.heading())
            .collect::<Vec<_>>()
            .join(" / ")
    )
    .unwrap();
    for unit in units {
        let times: Vec<String> = targets
            .iter()
            .map(|t| format!("{:.1}", runs[&(*t, *unit)].elapsed.as_secs_f64()))
            .collect();
        writeln!(out, "  {unit:<16}{}", times.join(" / ")).unwrap();
    }
    out
}

/// The tests that pass against redis-server but not against keel, by unit, and where, with
/// the suite's message for each failure.
fn not_passed(runs: &BTreeMap<(Target, &str), UnitRun>, units: &[&str]) -> String {
    let mut out = String::from("passed against redis-server, not against keel:\n");
    for unit in units {
        for (name, outcome) in &runs[&(Target::Redis, *unit)].outcomes {
            if *outcome != SuiteResult::Passed {
                continue;
            }
            let missed: Vec<&str> = [Target::Leader, Target::Follower]
                .into_iter()
                .filter(|t| runs[&(*t, *unit)].outcomes.get(name) != Some(&SuiteResult::Passed))
                .map(|t| t.role())
                .collect();
            if !missed.is_empty() {
                writeln!(out, "  {unit}: {name} ({})", missed.join(", ")).unwrap();
                for target in [Target::Leader, Target::Follower] {
                    if let Some(message) = runs[&(target, *unit)].failures.get(name) {
                        let message = message.trim_end().replace('\n', "\n        ");
                        writeln!(out, "      {}: {message}", target.role()).unwrap();
                    }
                }
            }
        }
    }
    out
}

fn units_to_run() -> Vec<&'static str> {
    match std::env::var("KEEL_REDIS_SUITE_UNITS") {
        Ok(chosen) => chosen
            .split_whitespace()
            .map(|name| {
                *UNITS.iter().find(|u| **u == name).unwrap_or_else(|| {
                    panic!("KEEL_REDIS_SUITE_UNITS: no unit {name} in {UNITS:?}")
                })
            })
            .collect(),
        Err(_) => UNITS.to_vec(),
    }
}

#[test]
#[expect(clippy::too_many_lines)]
fn redis_test_suite_against_keel() {
    assert!(
        on_path("tclsh"),
        "tclsh is not installed: run `apt-get install -y tcl` (scripts/test installs it when \
         missing); Redis's test suite is written in Tcl"
    );
    let units = units_to_run();
    let skipped_tests = skip_list();
    let listed = read_passing_list();
    let mut runs: BTreeMap<(Target, &str), UnitRun> = BTreeMap::new();

    let redis = RedisServer::start();
    let suite = Suite::new(Target::Redis, &skipped_tests);
    for unit in &units {
        let run = suite.run_unit(unit, redis.port);
        runs.insert((Target::Redis, unit), run);
    }
    drop(redis);

    let mut cluster = Cluster::new("redis-suite", &[1, 2, 3], &[], &[]);
    for target in [Target::Leader, Target::Follower] {
        let suite = Suite::new(target, &skipped_tests);
        // Asked again before every run: leadership may have moved during the last one.
        let port = |cluster: &Cluster| {
            let leader = cluster.leader();
            let node = match target {
                Target::Leader => leader,
                _ => [1, 2, 3].into_iter().find(|&id| id != leader).unwrap(),
            };
            cluster.node(node).client_port
        };
        for unit in &units {
            let mut run = suite.run_unit(unit, port(&cluster));
            if run.lost_its_leader() {
                // An election in the middle of the unit (a loaded machine can delay heartbeats
                // past the election timeout) fails every later test with `TRYAGAIN no leader`:
                // the suite measures commands, not availability, so the unit runs once more.
                eprintln!(
                    "{unit} on the {target:?}: the cluster lost its leader; running it again"
                );
                run = suite.run_unit(unit, port(&cluster));
            }
            run.add_not_run(&runs[&(Target::Redis, *unit)]);
            runs.insert((target, unit), run);
            // A node the suite crashed is a bug to see here, not a failure of later units.
            for id in [1, 2, 3] {
                cluster.node_mut(id).assert_alive();
            }
        }
    }

    // Gone before the verdict: a test that did not pass is explained by the suite's message, not
    // by the nodes' logs (a node that crashed was reported above, with its log).
    drop(cluster);

    let targets = [Target::Redis, Target::Leader, Target::Follower];
    report(&table(&runs, &units, &targets));
    report(&not_passed(&runs, &units));

    // The harness itself: against redis-server every unit must run to its end and pass tests,
    // or nothing measured against keel means anything.
    for unit in &units {
        let baseline = &runs[&(Target::Redis, *unit)];
        assert!(
            baseline.finished
                && baseline.stopped.is_empty()
                && baseline.count(SuiteResult::Passed) > 0,
            "unit/{unit} did not run cleanly against redis-server: {:?}",
            baseline.stopped
        );
    }
    // Every skip-list entry (but a pattern, `/regexp`) must skip a test of the units run, or it
    // is stale or misspelt.
    if units == UNITS {
        let skipped_in_baseline: BTreeSet<&String> = units
            .iter()
            .flat_map(|u| runs[&(Target::Redis, *u)].outcomes.iter())
            .filter(|(_, o)| **o == SuiteResult::Skipped)
            .map(|(name, _)| name)
            .collect();
        let stale: Vec<&String> = skipped_tests
            .iter()
            .filter(|t| !t.starts_with('/') && !skipped_in_baseline.contains(t))
            .collect();
        assert!(
            stale.is_empty(),
            "vendor/redis-tests/keel-skiplist.txt names tests that no unit run holds: {stale:?}"
        );
    }

    if std::env::var_os("KEEL_REDIS_SUITE_BLESS").is_some_and(|v| v == "1") {
        bless(&listed, &runs, &units);
        return;
    }

    let mut regressions = Vec::new();
    let mut newly_passing = 0;
    for target in [Target::Leader, Target::Follower] {
        for unit in &units {
            let run = &runs[&(target, *unit)];
            for (name, outcome) in &run.outcomes {
                let key = (unit.to_string(), target.role().to_string(), name.clone());
                let is_listed = listed.contains(&key);
                if *outcome == SuiteResult::Passed && !is_listed {
                    newly_passing += 1;
                }
                if is_listed && *outcome != SuiteResult::Passed {
                    let why = run.failures.get(name).map_or("", String::as_str);
                    regressions.push(format!(
                        "unit/{unit} on the {}: {name:?} {outcome:?}\n{why}",
                        target.role()
                    ));
                }
            }
            for (listed_unit, role, name) in &listed {
                if listed_unit == unit && role == target.role() && !run.outcomes.contains_key(name)
                {
                    regressions.push(format!(
                        "unit/{unit} on the {role}: {name:?} listed but not reported at all"
                    ));
                }
            }
        }
    }
    if newly_passing > 0 {
        report(&format!(
            "newly passing: {newly_passing} (not in vendor/redis-tests/keel-passing.txt), \
             run with KEEL_REDIS_SUITE_BLESS=1\n"
        ));
    }
    assert!(
        regressions.is_empty(),
        "{} tests listed in vendor/redis-tests/keel-passing.txt did not pass:\n{}",
        regressions.len(),
        regressions.join("\n")
    );
}
