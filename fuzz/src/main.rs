//! One AFL++ persistent-mode binary for every target: `keel-fuzz-afl <target>`. A panic in the
//! target aborts the process, which AFL++ records as a crash.

fn main() {
    let name = std::env::args().nth(1).unwrap_or_default();
    let Some(target) = keel_fuzz::target(&name) else {
        let names: Vec<&str> = keel_fuzz::TARGETS.iter().map(|(n, _)| *n).collect();
        eprintln!(
            "usage: keel-fuzz-afl <target>; targets: {}",
            names.join(", ")
        );
        std::process::exit(2);
    };
    afl::fuzz!(|data: &[u8]| {
        target(data);
    });
}
