//! The configuration file: defaults, the committed default file, and clear errors.

use muster::config::{Config, QueueingPolicy};

#[test]
fn the_committed_default_file_is_the_built_in_default() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scheduler-config/default.yaml");
    assert_eq!(Config::load(&path).expect("default file loads"), Config::default());
}

#[test]
fn fields_left_out_take_their_defaults() {
    let config = Config::parse("queueing: StrictFIFO\n", "test.yaml").unwrap();
    assert_eq!(config.queueing, QueueingPolicy::StrictFifo);
    assert_eq!(config.scheduler_name, "muster");
}

#[test]
fn bad_files_are_clear_errors_naming_the_file_and_the_problem() {
    let unknown = Config::parse("schedulerNmae: x\n", "bad.yaml").unwrap_err().to_string();
    assert!(unknown.starts_with("invalid configuration bad.yaml: unknown field `schedulerNmae`"), "{unknown}");
    let value = Config::parse("scoring: Random\n", "bad.yaml").unwrap_err().to_string();
    assert!(value.contains("unknown variant `Random`"), "{value}");
    let backoff = Config::parse("backoff: {initialSeconds: 10, maxSeconds: 1}\n", "bad.yaml").unwrap_err().to_string();
    assert_eq!(backoff, "invalid configuration bad.yaml: backoff needs 0 < initialSeconds <= maxSeconds");
    let missing = Config::load(std::path::Path::new("/nonexistent/muster.yaml")).unwrap_err().to_string();
    assert!(missing.starts_with("failed to read configuration /nonexistent/muster.yaml"), "{missing}");
}

#[test]
fn client_connection_limits_read_as_kube_scheduler_writes_them_and_bad_ones_are_refused() {
    let config = Config::parse("clientConnection: {qps: 50, burst: 100}\n", "test.yaml").unwrap();
    assert_eq!((config.client_connection.qps, config.client_connection.burst), (50.0, 100));
    assert_eq!(config.client_connection.max_in_flight, 256, "left out, it keeps its default");
    for bad in ["{qps: -1}", "{qps: 10, burst: 0}", "{maxInFlight: 0}"] {
        let error = Config::parse(&format!("clientConnection: {bad}\n"), "bad.yaml").unwrap_err().to_string();
        assert!(error.starts_with("invalid configuration bad.yaml: clientConnection needs"), "{bad}: {error}");
    }
}
