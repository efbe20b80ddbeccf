//! An embedder's state machine under the simulator (`keel_sim::embed`): a correct one runs clean,
//! and each of four deliberately broken ones is caught within 500 seeds, with the reason named.
//!
//! The machine counts how often each name was added (`add <name>` answers the name's count and
//! the total over all names). Its flaws, each behind a switch: `apply` stamps the state with the
//! wall clock; the counts live in a `HashMap` that the snapshot writes in its iteration order;
//! the snapshot leaves out the total; the model expects an add to answer the count before it.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io::Read;
use std::marker::PhantomData;

use bytes::Bytes;
use keel_core::LogId;
use keel_engine::{ApplyError, RestoreError, SnapshotWriter, StateMachine};
use keel_sim::embed::{
    check, simulate, sweep, Model, Op, OpRng, Sequential, Spec, Workload, WorkloadReport,
};
use keel_sim::RunConfig;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flaw {
    None,
    /// `apply` records the wall clock's time in the state.
    WallClock,
    /// The counts are a `HashMap`, written to the snapshot in iteration order.
    HashMapSnapshot,
    /// The snapshot leaves out the total, which restore then starts from zero.
    SnapshotForgetsTotal,
}

/// Counts per name, in a `BTreeMap` (or a `HashMap` with `Flaw::HashMapSnapshot`).
enum Counts {
    Ordered(BTreeMap<String, u64>),
    Hashed(HashMap<String, u64>),
}

impl Counts {
    fn get(&self, name: &str) -> u64 {
        match self {
            Counts::Ordered(m) => m.get(name).copied().unwrap_or(0),
            Counts::Hashed(m) => m.get(name).copied().unwrap_or(0),
        }
    }

    fn add(&mut self, name: &str) -> u64 {
        let count = match self {
            Counts::Ordered(m) => m.entry(name.to_string()).or_default(),
            Counts::Hashed(m) => m.entry(name.to_string()).or_default(),
        };
        *count += 1;
        *count
    }

    fn pairs(&self) -> Vec<(String, u64)> {
        match self {
            Counts::Ordered(m) => m.iter().map(|(k, v)| (k.clone(), *v)).collect(),
            Counts::Hashed(m) => m.iter().map(|(k, v)| (k.clone(), *v)).collect(),
        }
    }
}

struct Tally {
    counts: Counts,
    total: u64,
    /// With `Flaw::WallClock`: when the last entry was applied, by this replica's clock.
    updated_at_ns: u64,
    flaw: Flaw,
}

impl Tally {
    fn new(flaw: Flaw) -> Tally {
        let counts = match flaw {
            Flaw::HashMapSnapshot => Counts::Hashed(HashMap::new()),
            _ => Counts::Ordered(BTreeMap::new()),
        };
        Tally {
            counts,
            total: 0,
            updated_at_ns: 0,
            flaw,
        }
    }
}

impl StateMachine for Tally {
    fn apply(&mut self, _at: LogId, data: &Bytes) -> Result<Bytes, ApplyError> {
        let Ok(name) = std::str::from_utf8(data) else {
            return Err(ApplyError::Refused(Bytes::from_static(b"not a name")));
        };
        let count = self.counts.add(name);
        self.total += 1;
        if self.flaw == Flaw::WallClock {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
            self.updated_at_ns = now.map_or(0, |d| d.as_nanos() as u64);
        }
        let mut answer = count.to_le_bytes().to_vec();
        answer.extend_from_slice(&self.total.to_le_bytes());
        Ok(Bytes::from(answer))
    }

    fn snapshot_view(&self) -> Box<dyn SnapshotWriter> {
        let mut out = Vec::new();
        if self.flaw != Flaw::SnapshotForgetsTotal {
            out.extend_from_slice(&self.total.to_le_bytes());
        }
        out.extend_from_slice(&self.updated_at_ns.to_le_bytes());
        for (name, count) in self.counts.pairs() {
            out.push(name.len() as u8);
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(&count.to_le_bytes());
        }
        Box::new(out)
    }

    fn restore(&mut self, _last: LogId, data: &mut dyn Read) -> Result<(), RestoreError> {
        let mut bytes = Vec::new();
        data.read_to_end(&mut bytes)
            .map_err(|e| RestoreError(e.to_string()))?;
        let mut fresh = Tally::new(self.flaw);
        let mut rest = &bytes[..];
        let u64_at = |rest: &mut &[u8]| -> Result<u64, RestoreError> {
            let (head, tail) = rest
                .split_at_checked(8)
                .ok_or_else(|| RestoreError("truncated".into()))?;
            *rest = tail;
            Ok(u64::from_le_bytes(head.try_into().expect("8 bytes")))
        };
        if self.flaw != Flaw::SnapshotForgetsTotal {
            fresh.total = u64_at(&mut rest)?;
        }
        fresh.updated_at_ns = u64_at(&mut rest)?;
        while let Some((&len, tail)) = rest.split_first() {
            let (name, tail) = tail
                .split_at_checked(len as usize)
                .ok_or_else(|| RestoreError("truncated name".into()))?;
            let name = String::from_utf8(name.to_vec()).map_err(|e| RestoreError(e.to_string()))?;
            rest = tail;
            let count = u64_at(&mut rest)?;
            for _ in 0..count {
                fresh.counts.add(&name);
            }
        }
        *self = fresh;
        Ok(())
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Ask {
    Add,
    Read,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Told(u64);

impl fmt::Display for Ask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self:?}")
    }
}

impl fmt::Display for Told {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A name's count: an add answers the count after it, a read the count.
#[derive(Clone, Debug, PartialEq, Eq)]
struct CountModel;

/// The wrong model: it expects an add to answer the count before it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct CountBeforeModel;

fn count_step(count: u64, ask: &Ask, told: u64, add_answers_before: bool) -> Option<u64> {
    match ask {
        Ask::Add if add_answers_before => (told == count).then_some(count + 1),
        Ask::Add => (told == count + 1).then_some(count + 1),
        Ask::Read => (told == count).then_some(count),
    }
}

macro_rules! count_model {
    ($model:ty, $before:expr) => {
        impl Model for $model {
            type State = u64;
            type Input = Ask;
            type Output = Told;

            fn init() -> u64 {
                0
            }

            fn step(count: &u64, ask: &Ask, told: &Told) -> Option<u64> {
                count_step(*count, ask, told.0, $before)
            }

            fn step_unobserved(count: &u64, ask: &Ask) -> Option<u64> {
                (*ask == Ask::Add).then_some(count + 1)
            }

            fn is_read_only(ask: &Ask, _told: Option<&Told>) -> bool {
                *ask == Ask::Read
            }

            fn may_still_return(count: &u64, ask: &Ask, told: &Told) -> bool {
                let needed = if *ask == Ask::Add && !$before {
                    told.0 - 1
                } else {
                    told.0
                };
                *count <= needed
            }

            fn constrains(ask: &Ask, told: &Told) -> bool {
                // An add told 0 under the correct model is impossible from any state.
                !(*ask == Ask::Add && !$before && told.0 == 0)
            }

            fn is_monotone(_ask: &Ask) -> bool {
                true
            }
        }
    };
}

count_model!(CountModel, false);
count_model!(CountBeforeModel, true);

/// The same count as a [`Spec`]: what each operation answers, nothing more.
struct CountSpec;

impl Spec for CountSpec {
    type State = u64;
    type Input = Ask;
    type Output = Told;

    fn init() -> u64 {
        0
    }

    fn run(count: &u64, ask: &Ask) -> (u64, Told) {
        match ask {
            Ask::Add => (count + 1, Told(count + 1)),
            Ask::Read => (*count, Told(*count)),
        }
    }

    fn is_read_only(ask: &Ask) -> bool {
        *ask == Ask::Read
    }
}

const NAMES: [&str; 4] = ["a", "b", "c", "d"];

struct Tallies<M> {
    flaw: Flaw,
    model: PhantomData<M>,
}

impl<M> Tallies<M> {
    fn new(flaw: Flaw) -> Self {
        Tallies {
            flaw,
            model: PhantomData,
        }
    }
}

impl<M: Model<Input = Ask, Output = Told>> Workload for Tallies<M> {
    type Machine = Tally;
    type Model = M;

    fn machine(&self) -> Tally {
        Tally::new(self.flaw)
    }

    fn next_op(&mut self, _client: usize, rng: &mut OpRng<'_>) -> Op<Ask> {
        let name = NAMES[rng.below(NAMES.len() as u64) as usize];
        if rng.chance(0.3) {
            Op::Read {
                key: name.to_string(),
                input: Ask::Read,
            }
        } else {
            Op::Write {
                key: name.to_string(),
                input: Ask::Add,
                command: Bytes::from_static(name.as_bytes()),
            }
        }
    }

    fn write_output(_name: &str, _ask: &Ask, answer: Result<&Bytes, &Bytes>) -> Told {
        let answer = answer.expect("a tally refuses only what is not a name");
        Told(u64::from_le_bytes(answer[..8].try_into().expect("8 bytes")))
    }

    fn read(tally: &Tally, name: &str, _ask: &Ask) -> Told {
        Told(tally.counts.get(name))
    }
}

/// The first seed below 500 whose run breaks a check, with its report.
fn first_failure<W: Workload>(make: impl Fn() -> W) -> Option<WorkloadReport> {
    (0..500).find_map(|seed| {
        let report = simulate(make(), &RunConfig::new(seed));
        report.violation.is_some().then_some(report)
    })
}

fn caught(flaw: Flaw, expected: &str) {
    let report = first_failure(|| Tallies::<CountModel>::new(flaw))
        .unwrap_or_else(|| panic!("{flaw:?}: no seed below 500 caught it"));
    let violation = report.violation.expect("a failure");
    println!("{flaw:?}: seed {}: {violation}", report.seed);
    assert_eq!(violation.invariant, expected, "{flaw:?}: {violation}");
}

#[test]
fn a_correct_machine_runs_clean() {
    for seed in 0..20 {
        let report = simulate(
            Tallies::<CountModel>::new(Flaw::None),
            &RunConfig::new(seed),
        );
        assert!(report.violation.is_none(), "seed {seed}: {report:?}");
        assert!(report.ops_completed > 0, "seed {seed}: nothing completed");
    }
}

#[test]
fn an_apply_that_reads_the_wall_clock_is_caught() {
    caught(Flaw::WallClock, "state digest");
}

#[test]
fn a_snapshot_in_hash_order_is_caught() {
    caught(Flaw::HashMapSnapshot, "state digest");
}

#[test]
fn a_snapshot_that_forgets_a_field_is_caught() {
    caught(Flaw::SnapshotForgetsTotal, "apply answers agree");
}

#[test]
fn a_model_that_disagrees_with_the_reads_is_caught() {
    let report = first_failure(|| Tallies::<CountBeforeModel>::new(Flaw::None))
        .expect("no seed below 500 caught the wrong model");
    let violation = report.violation.expect("a failure");
    println!("wrong model: seed {}: {violation}", report.seed);
    assert_eq!(violation.invariant, "linearizability", "{violation}");
}

#[test]
fn a_seed_replays_exactly() {
    let cfg = RunConfig {
        trace: true,
        ..RunConfig::new(7)
    };
    let a = simulate(Tallies::<CountModel>::new(Flaw::None), &cfg);
    let b = simulate(Tallies::<CountModel>::new(Flaw::None), &cfg);
    assert_eq!(a.trace_digest, b.trace_digest);
    assert_eq!(a.trace, b.trace);
    assert!(a.trace.len() > 1000, "a trace of {} lines", a.trace.len());
}

#[test]
fn a_spec_is_a_model() {
    for seed in 0..8 {
        let report = simulate(
            Tallies::<Sequential<CountSpec>>::new(Flaw::None),
            &RunConfig::new(seed),
        );
        assert!(report.violation.is_none(), "seed {seed}: {report:?}");
    }
    // The spec's model rejects what the correct model rejects.
    assert_eq!(
        <Sequential<CountSpec> as Model>::step(&3, &Ask::Add, &Told(3)),
        None
    );
    assert_eq!(
        <Sequential<CountSpec> as Model>::step(&3, &Ask::Add, &Told(4)),
        Some(4)
    );
    assert_eq!(
        <Sequential<CountSpec> as Model>::step_unobserved(&3, &Ask::Read),
        None
    );
}

#[test]
fn a_sweep_on_two_threads_sums_up_every_seed() {
    let clean = sweep(|| Tallies::<CountModel>::new(Flaw::None), 0..6, 20_000, 2);
    assert_eq!((clean.seeds, clean.failed), (6, 0), "{clean}");
    assert!(clean.failures.is_empty());
    let alone: u64 = (0..6)
        .map(|seed| {
            simulate(
                Tallies::<CountModel>::new(Flaw::None),
                &RunConfig::new(seed),
            )
            .steps
        })
        .sum();
    assert_eq!(clean.steps, alone, "the threads ran each seed once");
    let broken = sweep(
        || Tallies::<CountModel>::new(Flaw::WallClock),
        3..9,
        20_000,
        2,
    );
    assert_eq!(broken.failed, 6, "{broken}");
    let seeds: Vec<u64> = broken.failures.iter().map(|r| r.seed).collect();
    assert_eq!(seeds, vec![3, 4, 5, 6, 7, 8], "kept lowest first");
}

#[test]
#[should_panic(expected = "no clock, random source or hash-map order")]
fn check_names_the_reason() {
    check(|| Tallies::<CountModel>::new(Flaw::WallClock));
}
