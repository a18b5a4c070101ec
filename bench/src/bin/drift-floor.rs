//! `drift-floor`: the floor of the serving stack in the load benchmark (see
//! `drift_bench::floor`); takes `drift-sentinel serve`'s flags.

fn main() -> std::process::ExitCode {
    drift_bench::reference_main(drift_bench::Reference::Floor, "drift-floor")
}
