//! Writes every target's seed inputs to `DIR/<target>/seed-NN`:
//! `cargo run -p keel-fuzz --example seeds -- DIR`.

use std::path::PathBuf;

fn main() -> std::io::Result<()> {
    let dir = PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| {
        eprintln!("usage: seeds DIR");
        std::process::exit(2)
    }));
    for (name, _) in keel_fuzz::TARGETS {
        let target_dir = dir.join(name);
        std::fs::create_dir_all(&target_dir)?;
        for (i, seed) in keel_fuzz::seeds::seeds(name).iter().enumerate() {
            std::fs::write(target_dir.join(format!("seed-{i:02}")), seed)?;
        }
    }
    Ok(())
}
