//! `drift-bench-fixtures DIR`: writes the load benchmark's fixtures into DIR (see
//! `drift_bench::fixtures::write_all`): `ca.crt`, `tls.crt`, `tls.key`, `rules/` (20 rule
//! ConfigMaps, the matching one tried last) and `image.json`, `replicas.json`,
//! `apply.json`, `args-200k.json`, `items-2m.json`. Prints each review's path and size in bytes.

use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let (Some(dir), None) = (args.next(), args.next()) else {
        eprintln!("usage: drift-bench-fixtures DIR");
        return ExitCode::from(2);
    };
    match drift_bench::fixtures::write_all(std::path::Path::new(&dir)) {
        Ok(written) => {
            for (path, bytes) in written {
                println!("{} {bytes}", path.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("drift-bench-fixtures: {e:#}");
            ExitCode::FAILURE
        }
    }
}
