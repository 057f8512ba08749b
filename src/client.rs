//! A `kube::Client` whose TCP sockets have `TCP_NODELAY` set.
//!
//! Why: kube-client's connector leaves Nagle's algorithm on, and a small request written while
//! the previous segment is unacknowledged waits for that ACK, which the API server's kernel
//! delays (Linux: at least 40 ms). On a lock handover that is a constant ~40 ms: the benchmark's
//! voluntary handover went from 61 ms to 27 ms p50 with delayed ACKs turned off on loopback
//! (README "Performance"). The Go API server sets `TCP_NODELAY` on its side; kube 5.0.0 offers
//! no way to set it on ours (kube-rs/kube#2056), so [`from_config`] assembles the same stack as
//! `kube::Client::try_from(Config)` from kube's public layers ([`kube::client::ConfigExt`]):
//! rustls with the config's certificates, the connect/read/write timeouts, the base URI, the
//! retry of 429/503/504 when `default_retry` is set, authentication (tokens, client
//! certificates, exec plugins, with refresh) and extra headers (impersonation). Left out:
//! kube's per-request `tracing` debug spans. A config with a proxy URL gets kube's own client
//! (Nagle on): kube's proxy connectors are kept as they are.

use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::client::ConfigExt;
use kube::client::retry::RetryPolicy;
use kube::{Client, Config};
use tower::{BoxError, ServiceBuilder};

/// Builds a client for `config` with `TCP_NODELAY` on its connections (see the module docs).
///
/// # Errors
/// As `kube::Client::try_from(config)`: the TLS or authentication setup from the config fails
/// (an unreadable certificate, an exec plugin that cannot be set up).
pub fn from_config(config: Config) -> kube::Result<Client> {
    if config.proxy_url.is_some() {
        return Client::try_from(config);
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    let https = config.rustls_https_connector_with_connector(http)?;
    let mut connector = hyper_timeout::TimeoutConnector::new(https);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let hyper = hyper_util::client::legacy::Builder::new(TokioExecutor::new()).build(connector);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.default_retry.then(|| tower::retry::RetryLayer::new(RetryPolicy::server_retry())))
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(hyper);
    Ok(Client::new(service, config.default_namespace))
}

/// [`from_config`] for the default configuration: the kubeconfig (`$KUBECONFIG`,
/// `~/.kube/config`), else the in-cluster service account, as `kube::Client::try_default`.
///
/// # Errors
/// No configuration is found, or [`from_config`] fails.
pub async fn try_default() -> kube::Result<Client> {
    from_config(Config::infer().await.map_err(kube::Error::InferConfig)?)
}
