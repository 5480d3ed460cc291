//! Run a sweep from the command line while the CLI is not wired up:
//! `cargo run -p chorus-sim --example explore -- MODE PILLARS N FAULTS FIRST SEEDS [BYZANTINE] [REQUESTS]`.
use chorus_core::OrderingMode;
use chorus_sim::{run_many_progress, SimOptions};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 7 {
        eprintln!("usage: explore MODE PILLARS N FAULTS FIRST SEEDS [BYZANTINE] [REQUESTS]");
        std::process::exit(2);
    }
    let mode: OrderingMode = args[1].parse().expect("mode");
    let pillars: u32 = args[2].parse().expect("pillars");
    let n: usize = args[3].parse().expect("n");
    let faults = args[4].parse().expect("faults");
    let first: u64 = args[5].parse().expect("first seed");
    let seeds: u64 = args[6].parse().expect("seeds");
    let mut o = SimOptions::new(mode, pillars, n)
        .with_faults(faults)
        .with_seeds(first, seeds);
    if let Some(b) = args.get(7).filter(|b| *b != "f") {
        o.byzantine = Some(b.parse().expect("byzantine"));
    }
    if let Some(r) = args.get(8) {
        o.requests_per_client = r.parse().expect("requests");
    }
    let t = std::time::Instant::now();
    let mut last = std::time::Instant::now();
    let s = run_many_progress(&o, |r| {
        if !r.ok() {
            eprint!("{r}")
        }
        if std::env::var("EXPLORE_TIMES").is_ok() {
            eprintln!(
                "seed {} took {:?}: {} new-view, {} view-change, {:.1}s virtual, drawn {}",
                r.seed,
                last.elapsed(),
                r.counters.by_kind.get("new-view").unwrap_or(&0),
                r.counters.by_kind.get("view-change").unwrap_or(&0),
                r.virtual_us as f64 / 1e6,
                r.faults_drawn
            );
        }
        last = std::time::Instant::now();
    });
    println!("{s}");
    println!("wall {:?}", t.elapsed());
}
