//! Admin HTTP server: `/livez`, `/readyz` (ready once every watch has synced its cache, and
//! not while protocol writes keep failing: [`crate::health`]), and `/metrics` (Prometheus text
//! format).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;

use crate::health::WriteHealth;

/// Length in bytes of the last `/metrics` body, to size the next one.
static LAST_METRICS_LEN: AtomicUsize = AtomicUsize::new(0);

/// Shared state of the admin endpoints.
pub struct AdminState {
    /// Set once every reflector store has synced.
    pub ready: AtomicBool,
    /// The metrics registry rendered at `/metrics`.
    pub registry: Registry,
    /// Outcomes of the protocol writes: `/readyz` is 503 while they keep failing.
    pub writes: Arc<WriteHealth>,
}

/// Builds the router.
pub fn router(state: Arc<AdminState>) -> Router {
    Router::new()
        .route("/livez", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(state)
}

async fn readyz(State(s): State<Arc<AdminState>>) -> impl IntoResponse {
    if !s.ready.load(Ordering::Relaxed) {
        return (StatusCode::SERVICE_UNAVAILABLE, "caches not synced".to_string());
    }
    match s.writes.check(Instant::now()) {
        Ok(()) => (StatusCode::OK, "ok".to_string()),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, why),
    }
}

async fn metrics(State(s): State<Arc<AdminState>>) -> impl IntoResponse {
    // Refreshes the failing-writes gauge.
    let _ = s.writes.check(Instant::now());
    // With 10,000 locks the body is about 2 MiB. Sized from the last one (plus an eighth), it is
    // one allocation instead of a doubling `String` that holds its old and new buffers at once
    // while it grows.
    let last = LAST_METRICS_LEN.load(Ordering::Relaxed);
    let mut body = String::with_capacity(last + last / 8);
    if let Err(e) = prometheus_client::encoding::text::encode(&mut body, &s.registry) {
        return (StatusCode::INTERNAL_SERVER_ERROR, [(header::CONTENT_TYPE, "text/plain")], e.to_string());
    }
    LAST_METRICS_LEN.store(body.len(), Ordering::Relaxed);
    (StatusCode::OK, [(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], body)
}

/// Serves the admin endpoints on `addr` until the process ends.
///
/// # Errors
/// Fails if the address cannot be bound.
pub async fn serve(addr: SocketAddr, state: Arc<AdminState>) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    tracing::info!(%addr, "admin server listening");
    axum::serve(listener, router(state)).await
}
