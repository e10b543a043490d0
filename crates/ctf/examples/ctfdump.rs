//! Prints a trace's events one a line as `babeltrace2 --clock-seconds` does, or with `--count`
//! only the number of events and the decoding rate (every event still decoded with all its
//! fields): `cargo run -p ctf --release --example ctfdump -- [--count] DIR`.

use std::time::Instant;

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let count_only = args.first().is_some_and(|a| a == "--count");
    if count_only {
        args.remove(0);
    }
    let Some(root) = args.first() else {
        eprintln!("usage: ctfdump [--count] TRACE_DIR");
        std::process::exit(2);
    };
    let t0 = Instant::now();
    let mut n = 0u64;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    for dir in ctf::Trace::find(std::path::Path::new(root)).unwrap_or_else(|e| fail(e)) {
        let trace = ctf::Trace::open(&dir).unwrap_or_else(|e| fail(e));
        let hostname = trace.metadata().env("hostname").unwrap_or("").to_string();
        let mut prev = None;
        let mut events = trace.events();
        while let Some(ev) = events.next() {
            let ev = ev.unwrap_or_else(|e| fail(e));
            n += 1;
            if !count_only {
                use std::io::Write as _;
                let line = ctf::babeltrace_line(&ev, prev, &hostname, ctf::TextClock::Seconds);
                if writeln!(out, "{line}").is_err() {
                    std::process::exit(0);
                }
            }
            prev = Some(ev.ns_from_origin);
            events.recycle(ev);
        }
    }
    drop(out);
    let s = t0.elapsed().as_secs_f64();
    eprintln!("{n} events in {s:.3} s = {:.0} events/s", n as f64 / s);
}

fn fail(e: ctf::Error) -> ! {
    eprintln!("error: {e}");
    std::process::exit(1);
}
