//! The example runs a real 4-replica cluster and gets its answers.
#[test]
fn the_example_cluster_counts() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_custom-service"))
        // Below the ranges the chorus-cli integration tests probe (2 000 and up).
        .env("BASE_PORT", "1100")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("incr apples -> 2") && text.contains("apples = 2"), "{text}");
}
