//! Lists the methods of a ReadyToRun image (`RVA LEN NAME`), or names file offsets given after it.
//! `cargo run -p r2r --example r2rdump -- IMAGE.dll [0xOFFSET…]`

use std::sync::Arc;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(path) = args.first() else {
        eprintln!("usage: r2rdump IMAGE.dll [0xFILEOFFSET...]");
        std::process::exit(2);
    };
    let image = match r2r::R2rImage::open(std::path::Path::new(path), Arc::new(r2r::ModuleCache::default())) {
        Ok(Ok(i)) => i,
        Ok(Err(e)) => {
            eprintln!("{path}: {e}");
            std::process::exit(1);
        }
        Err(e) => {
            eprintln!("{path}: {e}");
            std::process::exit(1);
        }
    };
    eprintln!("{path}: {:?}", image.stats);
    if args.len() > 1 {
        for a in &args[1..] {
            let off = u64::from_str_radix(a.trim_start_matches("0x"), 16).unwrap_or(0);
            match image.method_at_file_offset(off) {
                Some(m) => println!("{a} {:#x}+{:#x} {}", m.rva, m.len, m.name),
                None => println!("{a} -"),
            }
        }
    } else {
        for m in image.methods() {
            println!("{:08x} {:x} {}", m.rva, m.len, m.name);
        }
    }
}
