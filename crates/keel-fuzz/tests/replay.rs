//! Replays every checked-in input through its target: the seed corpora (`corpus/<target>`) and
//! every input that once crashed a target (`regressions/<target>`). This is how CI replays the
//! fuzzers' findings: `cargo test` runs it.

use std::path::Path;

use keel_fuzz::{corpus_dirs, replay_dir, seeds, Target, TARGETS};

#[test]
fn every_corpus_and_regression_input_passes_its_target() {
    let mut failures = Vec::new();
    for (name, target) in TARGETS {
        let mut ran = 0;
        for dir in corpus_dirs(name) {
            let (n, failed) = replay_dir(&dir, *target).expect("read the corpus");
            ran += n;
            failures.extend(failed);
        }
        assert!(ran > 0, "no corpus for target {name}");
    }
    assert!(failures.is_empty(), "inputs that panic: {failures:#?}");
}

#[test]
fn every_seed_passes_its_target() {
    for (name, target) in TARGETS {
        let seeds = seeds::seeds(name);
        assert!(!seeds.is_empty(), "no seeds for {name}");
        for seed in seeds {
            target(&seed);
        }
    }
}

#[test]
fn the_targets_take_any_short_input() {
    // Every input of up to two bytes, and a few of every length up to 64.
    for (_, target) in TARGETS {
        target(&[]);
        for a in 0..=255u8 {
            target(&[a]);
            target(&[a, a.wrapping_mul(31)]);
        }
        for len in 0..64 {
            target(&vec![0xff; len]);
            target(&(0..len as u8).collect::<Vec<_>>());
        }
    }
}

/// Panics on inputs that start with "boom": stands in for a target with a bug.
fn panics_on_marker(data: &[u8]) {
    assert!(!data.starts_with(b"boom"), "marker input");
}

#[test]
fn the_replay_reports_an_input_that_panics() {
    let dir = std::env::temp_dir().join(format!("keel-fuzz-replay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("fine"), b"harmless").unwrap();
    std::fs::write(dir.join("crash"), b"boom!").unwrap();
    let target: Target = panics_on_marker;
    let (ran, failures) = replay_dir(&dir, target).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(ran, 2);
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert_eq!(failures[0].path.file_name().unwrap(), "crash");
    assert!(failures[0].message.contains("marker input"));
}

#[test]
fn a_missing_directory_replays_nothing() {
    let (ran, failures) = replay_dir(Path::new("/nonexistent/keel-fuzz"), |_| {}).unwrap();
    assert_eq!((ran, failures.len()), (0, 0));
}
