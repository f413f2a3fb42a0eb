//! The HTTP client rattler downloads with: reqwest over rustls with ring's crypto (rattler's
//! own TLS features would build aws-lc, a large C library, for the same job).

use std::sync::Once;

static PROVIDER: Once = Once::new();

/// A client for channel indexes and packages. `file://` channels never touch it.
pub(crate) fn client() -> reqwest::Client {
    PROVIDER.call_once(|| {
        // Fails only when another provider is already installed, which then serves us too.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
    reqwest::Client::builder()
        .user_agent(concat!("comfy-airlock/", env!("CARGO_PKG_VERSION")))
        .connect_timeout(std::time::Duration::from_secs(15))
        .build()
        .unwrap_or_default()
}

/// GETs `url` as text (a wheel index page); the error says why, on one line.
pub fn fetch_text(url: &str) -> Result<String, String> {
    let fetch = async {
        let resp = client()
            .get(url)
            .timeout(std::time::Duration::from_secs(30))
            .send()
            .await
            .map_err(|e| crate::error::chain(&e))?;
        let status = resp.status();
        if !status.is_success() {
            return Err(format!("HTTP {status}"));
        }
        resp.text().await.map_err(|e| crate::error::chain(&e))
    };
    crate::block_on(fetch).map_err(|e| e.to_string())?
}
