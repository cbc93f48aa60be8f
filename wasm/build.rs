//! Marks the wasm-bindgen tests that need the fixture server (`tests/common`) as ignored,
//! with the reason, when `INSITUBATCH_HTTP_URL` is unset: wasm tests read it at build time
//! (`option_env!`), and wasm-bindgen-test can only skip a test that is marked when compiled.
//! Under CI (`CI` set, as in `.ci/run`) they are never ignored: there they fail instead.
//! Only the dev profile watches the variable: its value (a port) changes every run, and the
//! release builds of scripts/test-wasm.sh must not be rebuilt for it.

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rustc-check-cfg=cfg(ib_no_fixture_server)");
    if std::env::var("PROFILE").as_deref() != Ok("debug") {
        return;
    }
    println!("cargo::rerun-if-env-changed=INSITUBATCH_HTTP_URL");
    println!("cargo::rerun-if-env-changed=CI");
    let ci = std::env::var("CI").is_ok_and(|v| !matches!(v.trim().to_ascii_lowercase().as_str(), "" | "0" | "false"));
    if std::env::var_os("INSITUBATCH_HTTP_URL").is_none() && !ci {
        println!("cargo::rustc-cfg=ib_no_fixture_server");
    }
}
