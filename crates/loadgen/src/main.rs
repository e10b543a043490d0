//! `loadgen --target 127.0.0.1:5080 --route cpu=/cpu --route blocked=/blocked -c 2 -d 10`

use std::time::Duration;

use anyhow::Result;
use clap::Parser;

/// HTTP/1.1 load for a server on the loopback interface (127.0.0.0/8 or ::1 only).
#[derive(Parser, Debug)]
#[command(name = "loadgen", version)]
struct Args {
    /// host:port of the server (loopback only).
    #[arg(long, default_value = "127.0.0.1:5080")]
    target: String,
    /// A route to GET, as NAME=/path or /path; repeat for several.
    #[arg(long = "route", required = true)]
    routes: Vec<loadgen::Route>,
    /// Keep-alive connections per route.
    #[arg(short = 'c', long, default_value_t = 1)]
    connections: usize,
    /// Seconds to run.
    #[arg(short = 'd', long, default_value_t = 10.0)]
    duration: f64,
    /// Stop a route after this many requests.
    #[arg(short = 'n', long)]
    max_requests: Option<u64>,
    /// Timeout of one request, seconds.
    #[arg(long, default_value_t = 30.0)]
    timeout: f64,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

fn main() -> Result<()> {
    let args = Args::parse();
    if !(args.duration.is_finite()
        && args.duration > 0.0
        && args.timeout.is_finite()
        && args.timeout > 0.0)
    {
        anyhow::bail!("--duration and --timeout must be positive numbers of seconds");
    }
    let mut config = loadgen::Config::new(&args.target, args.routes)?;
    config.connections_per_route = args.connections;
    config.duration = Duration::from_secs_f64(args.duration);
    config.max_requests_per_route = args.max_requests;
    config.request_timeout = Duration::from_secs_f64(args.timeout);
    let report = loadgen::run(&config)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{report}");
    }
    Ok(())
}
