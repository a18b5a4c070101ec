//! `drift-checked-floor`: the floor of the serving stack with the strict pass over the body
//! that every answer needs (see `drift_bench::floor`); takes `drift-sentinel serve`'s flags.

fn main() -> std::process::ExitCode {
    drift_bench::reference_main(drift_bench::Reference::CheckedFloor, "drift-checked-floor")
}
