//! Credentials never leave the process in words: not in errors, TRACE logs, `describe()` or
//! pass reports. A password in an http(s) URL's user info and an S3 secret key given as a
//! storage option are used for real reads against the loopback servers, with every log
//! line of every library recorded at TRACE, and all of that text is searched for them.

use std::io::Write;
use std::sync::{Arc, Mutex};

use base64::Engine;
use insitubatch_native::{DatasetSpec, OpenOptions, VariablesSpec, open};
use insitubatch_tests::{http_url, s3_url};

const PASSWORD: &str = "pw-SECRET-4e1f";
const SECRET_KEY: &str = "sk-SECRET-9b2c";

/// Everything the tracing subscriber writes, kept in memory.
#[derive(Clone, Default)]
struct Recorded(Arc<Mutex<Vec<u8>>>);

impl Write for Recorded {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// One epoch, the report, the pass stats and a failing open, as text.
fn everything_said(url: &str, options: &OpenOptions) -> String {
    let mut said = Vec::new();
    let ds = open(url, options.clone()).unwrap_or_else(|e| panic!("open {url}: {e}"));
    for b in ds.train().unwrap() {
        said.push(format!("{:?}", b.unwrap().sample_indices));
    }
    said.push(serde_json::to_string(&ds.describe(1).unwrap()).unwrap());
    said.push(ds.describe(1).unwrap().render());
    let stats = ds.last_pass().unwrap();
    said.push(serde_json::to_string(&stats).unwrap());
    said.push(stats.summary());
    let missing = open(&format!("{url}_no_such_store"), options.clone()).unwrap_err();
    said.push(missing.to_string());
    said.push(format!("{missing:?}"));
    said.join("\n")
}

#[test]
fn credentials_appear_in_no_error_log_or_report() {
    let log = Recorded::default();
    let writer = log.clone();
    tracing_subscriber::fmt().with_max_level(tracing::Level::TRACE).with_writer(move || writer.clone()).init();
    tracing::trace!("recording");

    let t2m = DatasetSpec { variables: Some(VariablesSpec::Paths(vec!["t2m".into()])), ..DatasetSpec::default() };
    let vars = OpenOptions::from_spec(t2m.clone());
    let http = http_url().replacen("http://", &format!("http://reader:{PASSWORD}@"), 1);
    let mut said = everything_said(&format!("{http}/v3_zstd"), &vars);
    let s3 = OpenOptions::from_spec(DatasetSpec {
        storage_options: [("aws_secret_access_key".into(), SECRET_KEY.into())].into(),
        ..t2m
    });
    said.push_str(&everything_said(&format!("{}/v3_zstd", s3_url()), &s3));

    let logged = String::from_utf8_lossy(&log.0.lock().unwrap()).into_owned();
    assert!(logged.contains("recording") && logged.lines().count() > 20, "the recorder saw the libraries' logs");
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("reader:{PASSWORD}"));
    for secret in [PASSWORD, SECRET_KEY, basic.as_str()] {
        for (what, text) in [("an error or report", &said), ("a TRACE log line", &logged)] {
            let line = text.lines().find(|l| l.contains(secret));
            assert!(line.is_none(), "{secret} appears in {what}: {}", line.unwrap_or_default());
        }
    }
}

/// The signature-checking S3 server (`s3_server.py --auth`): its endpoint and the key it made.
fn signed_s3() -> (String, String, String) {
    let var =
        |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set: run through scripts/test.sh"));
    (var("INSITUBATCH_S3_AUTH_ENDPOINT"), var("INSITUBATCH_S3_AUTH_KEY_ID"), var("INSITUBATCH_S3_AUTH_SECRET"))
}

fn signed_options(endpoint: &str, key_id: &str, secret: &str) -> OpenOptions {
    OpenOptions::from_spec(DatasetSpec {
        variables: Some(VariablesSpec::Paths(vec!["t2m".into()])),
        storage_options: [
            ("aws_endpoint".into(), endpoint.into()),
            ("aws_access_key_id".into(), key_id.into()),
            ("aws_secret_access_key".into(), secret.into()),
        ]
        .into(),
        ..DatasetSpec::default()
    })
}

#[test]
fn signed_s3_reads_with_the_right_secret_and_refuses_a_wrong_one_clearly() {
    let (endpoint, key_id, secret) = signed_s3();
    let url = "s3://signed/v3_zstd";
    let ds = open(url, signed_options(&endpoint, &key_id, &secret)).unwrap_or_else(|e| panic!("signed read: {e}"));
    let n: usize = ds.all().unwrap().map(|b| b.unwrap().len()).sum();
    assert_eq!(n, 80, "every sample of the signed store");

    let wrong = format!("{secret}-wrong");
    let err = open(url, signed_options(&endpoint, &key_id, &wrong)).unwrap_err().to_string();
    assert!(err.ends_with(url) || err.contains(url), "the error names the store: {err}");
    assert!(
        err.contains("SignatureDoesNotMatch") || err.contains("403"),
        "the error says the signature was refused: {err}"
    );
    assert!(err.contains("check the access key id and secret"), "the error says what to check: {err}");
    assert!(!err.contains(&wrong) && !err.contains(&secret), "no secret in the error: {err}");
}
