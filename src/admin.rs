//! Admin HTTP server: `/livez`, `/readyz` (ready once every watch has synced its cache), and
//! `/metrics` (Prometheus text format).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;

/// Shared state of the admin endpoints.
pub struct AdminState {
    /// Set once every reflector store has synced.
    pub ready: AtomicBool,
    /// The metrics registry rendered at `/metrics`.
    pub registry: Registry,
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
    if s.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "caches not synced")
    }
}

async fn metrics(State(s): State<Arc<AdminState>>) -> impl IntoResponse {
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &s.registry) {
        Ok(()) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")],
            body,
        ),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, [(header::CONTENT_TYPE, "text/plain")], e.to_string()),
    }
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
