//! The Prometheus endpoint (`metrics.rs`), scraped over loopback HTTP like a Prometheus server
//! does: its figures equal the pass reports it was fed.

use std::io::{Read, Write};

use insitubatch_native::{DatasetSpec, OpenOptions, demo, open};

/// `GET /metrics` over a plain TCP connection: the body.
fn scrape(address: std::net::SocketAddr) -> String {
    let mut s = std::net::TcpStream::connect(address).expect("connect to the metrics endpoint");
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    reply.split_once("\r\n\r\n").map(|(_, body)| body.to_string()).unwrap()
}

/// The value of the series `name` whose labels include every one of `labels`.
fn value(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .find(|l| l.starts_with(&format!("{name}{{")) && labels.iter().all(|x| l.contains(x)))
        .and_then(|l| l.rsplit(' ').next())
        .unwrap_or_else(|| panic!("no {name} {labels:?} in\n{text}"))
        .parse()
        .unwrap()
}

#[test]
fn the_scraped_figures_equal_the_pass_reports() {
    let dir = tempfile::tempdir().unwrap();
    let store = demo::write_demo_store_sized(&dir.path().join("demo.zarr"), 48).unwrap();
    let options =
        OpenOptions::from_spec(DatasetSpec { metrics_address: Some("127.0.0.1:0".into()), ..DatasetSpec::default() });
    let ds = open(&store.display().to_string(), options).unwrap();
    let address = ds.metrics_address().expect("the endpoint is up");
    assert!(!scrape(address).contains("insitubatch_samples_total{"), "no pass has ended yet");

    let mut reports = Vec::new();
    for epoch in 0..2 {
        ds.set_epoch(epoch);
        for b in ds.train().unwrap() {
            b.unwrap();
        }
        reports.push(ds.last_pass().unwrap());
    }
    let text = scrape(address);
    let train = ["split=\"train\"", "rank=\"0\"", "world_size=\"1\""];
    let sum = |f: fn(&insitubatch_native::core::PassStats) -> u64| reports.iter().map(f).sum::<u64>() as f64;
    assert_eq!(value(&text, "insitubatch_passes_total", &train), 2.0);
    assert_eq!(value(&text, "insitubatch_samples_total", &train), sum(|p| p.samples));
    assert_eq!(value(&text, "insitubatch_batches_total", &train), sum(|p| p.batches as u64));
    assert_eq!(value(&text, "insitubatch_bytes_fetched_total", &train), sum(|p| p.bytes_fetched));
    assert_eq!(value(&text, "insitubatch_storage_reads_total", &train), sum(|p| p.storage_reads));
    let last = &reports[1];
    let p95 = value(&text, "insitubatch_batch_wait_seconds", &[train[0], "key=\"0.95\""]);
    assert!((p95 - last.batch_wait_p95_s).abs() <= 1e-12 * last.batch_wait_p95_s.max(1.0), "{p95}");
    let decode = value(&text, "insitubatch_stage_seconds_total", &[train[0], "key=\"decode\""]);
    let decode_sum: f64 = reports.iter().map(|p| p.times.decode_s).sum();
    assert!((decode - decode_sum).abs() <= 1e-9 * decode_sum.max(1.0), "{decode} vs {decode_sum}");
    let limiting = format!("key=\"{}\"", last.limiting_stage.name());
    assert_eq!(value(&text, "insitubatch_limiting_stage", &[train[0], &limiting]), 1.0);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn an_address_that_cannot_be_bound_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let store = demo::write_demo_store_sized(&dir.path().join("demo.zarr"), 16).unwrap();
    let refused = |address: &str| {
        let options =
            OpenOptions::from_spec(DatasetSpec { metrics_address: Some(address.into()), ..DatasetSpec::default() });
        open(&store.display().to_string(), options).unwrap_err().to_string()
    };
    let err = refused("256.0.0.1:1");
    assert!(err.contains("must be IP:PORT") && err.contains("256.0.0.1:1"), "{err}");
    // A port this test holds.
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let err = refused(&holder.local_addr().unwrap().to_string());
    assert!(err.contains("metrics endpoint cannot listen"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}

/// A request with these extra header lines: the answer's status line and its headers, lower case.
fn ask(address: std::net::SocketAddr, method: &str, headers: &str) -> (String, String) {
    let mut s = std::net::TcpStream::connect(address).expect("connect to the metrics endpoint");
    write!(s, "{method} /metrics HTTP/1.1\r\n{headers}Connection: close\r\n\r\n").unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    let (head, _) = reply.split_once("\r\n\r\n").unwrap();
    let (status, rest) = head.split_once("\r\n").unwrap();
    (status.to_string(), rest.to_ascii_lowercase())
}

#[test]
fn no_page_may_read_the_endpoint_unless_the_job_names_its_exact_origin() {
    let dir = tempfile::tempdir().unwrap();
    let store = demo::write_demo_store_sized(&dir.path().join("secret-project.zarr"), 16).unwrap();
    let open_with = |cors: Option<&str>| {
        let options = OpenOptions::from_spec(DatasetSpec {
            metrics_address: Some(":0".into()),
            metrics_cors_origin: cors.map(str::to_string),
            ..DatasetSpec::default()
        });
        open(&store.display().to_string(), options).unwrap()
    };
    let page = "Host: 127.0.0.1\r\nOrigin: http://localhost:5173\r\n";
    // Not asked: no CORS header for any origin (a bare port is loopback).
    let ds = open_with(None);
    let address = ds.metrics_address().unwrap();
    assert!(address.ip().is_loopback(), "{address}");
    let (status, headers) = ask(address, "GET", page);
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    assert!(!headers.contains("access-control-allow-origin"), "{headers}");
    for b in ds.train().unwrap() {
        b.unwrap();
    }
    let text = scrape(address);
    assert!(text.contains("insitubatch_samples_total{"), "{text}");
    assert!(!text.contains("secret-project") && !text.contains("t2m"), "the store's names are not exposed: {text}");
    drop(ds);
    // Asked for one origin: that exact origin, to that origin's requests only.
    let ds = open_with(Some("http://localhost:5173"));
    let address = ds.metrics_address().unwrap();
    let (_, headers) = ask(address, "GET", page);
    let lines: Vec<&str> = headers.split("\r\n").collect();
    assert!(lines.contains(&"access-control-allow-origin: http://localhost:5173"), "{headers}");
    assert!(lines.contains(&"vary: origin"), "a cache must key the answer by origin: {headers}");
    for other in ["http://localhost:5174", "http://evil.example", "null"] {
        let (_, headers) = ask(address, "GET", &format!("Host: 127.0.0.1\r\nOrigin: {other}\r\n"));
        assert!(!headers.contains("access-control-allow-origin"), "{other}: {headers}");
    }
    // A page whose own name resolves to 127.0.0.1 (DNS rebinding) is same-origin to the
    // browser, so CORS would not stop it: its Host is refused.
    let (status, _) = ask(address, "GET", "Host: evil.example:9400\r\n");
    assert!(status.starts_with("HTTP/1.1 403"), "{status}");
    let (status, _) = ask(address, "POST", "Host: localhost\r\nContent-Length: 0\r\n");
    assert!(status.starts_with("HTTP/1.1 405"), "{status}");
    drop(ds);
    let options = OpenOptions::from_spec(DatasetSpec {
        metrics_address: Some(":0".into()),
        metrics_cors_origin: Some("*".into()),
        ..DatasetSpec::default()
    });
    let e = open(&store.display().to_string(), options).unwrap_err().to_string();
    assert!(e.contains("one web origin") && e.contains("never \"*\""), "{e}");
}
