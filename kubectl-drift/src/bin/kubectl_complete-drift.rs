//! `kubectl_complete-drift`: kubectl (1.26 and later) runs it from PATH to complete
//! `kubectl drift …<TAB>`, with the words after `drift` (the last one being typed) as its
//! arguments. It prints one candidate a line, then cobra's `:DIRECTIVE`.

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut out = std::io::stdout().lock();
    // A shell waiting for completions has nothing to show of an error.
    let _ = kubectl_drift::kubectl_complete(args, &mut out).await;
}
