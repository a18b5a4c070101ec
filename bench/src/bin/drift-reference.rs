//! `drift-reference`: the parsing reference server of the load benchmark (see
//! `drift_bench::reference`); takes `drift-sentinel serve`'s flags.

fn main() -> std::process::ExitCode {
    drift_bench::reference_main(drift_bench::Reference::Parse, "drift-reference")
}
