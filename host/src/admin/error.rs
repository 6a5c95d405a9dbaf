//! The admin API's errors: a status and a typed JSON body,
//! `{"error": code, "message": text, "details": ...}`, and extractors that
//! answer bad input the same way instead of with plain text.

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use utoipa::ToSchema;

use crate::queue::QueueError;
use crate::replay::ReplayError;

/// Every error the admin API answers.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    /// A stable code: `invalid_body`, `invalid_cursor`, `not_found`, ...
    pub error: String,
    /// What went wrong, for a person.
    pub message: String,
    /// More, where there is more to say (problems by key, counts).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
}

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub body: ErrorBody,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &str, message: impl Into<String>) -> ApiError {
        ApiError { status, body: ErrorBody { error: code.into(), message: message.into(), details: None } }
    }

    pub fn with_details(mut self, details: Value) -> ApiError {
        self.body.details = Some(details);
        self
    }

    pub fn bad_request(code: &str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, code, message)
    }

    pub fn not_found(what: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", what)
    }

    pub fn conflict(code: &str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::CONFLICT, code, message)
    }

    /// The node runs without a store (`wal.mode: none`).
    pub fn no_store() -> ApiError {
        ApiError::new(StatusCode::CONFLICT, "no_store", "this node runs with wal.mode none: it keeps no rows")
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(self.body)).into_response()
    }
}

impl From<QueueError> for ApiError {
    fn from(e: QueueError) -> ApiError {
        match e {
            QueueError::InvalidCursor => {
                ApiError::bad_request("invalid_cursor", "the cursor was not issued by this node, or was altered")
            }
            QueueError::TooManyTenants { .. } => ApiError::bad_request("invalid_query", e.to_string()),
            QueueError::Closed => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "shutting_down", e.to_string()),
            QueueError::Corrupt(_) => {
                tracing::error!("admin request found damage in the store: {e}");
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "corrupt", e.to_string())
            }
            other => {
                tracing::error!("admin request failed on the store: {other}");
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "store_unavailable", other.to_string())
            }
        }
    }
}

impl From<ReplayError> for ApiError {
    fn from(e: ReplayError) -> ApiError {
        match e {
            ReplayError::Queue(q) => q.into(),
            ReplayError::TooMany => ApiError::new(StatusCode::TOO_MANY_REQUESTS, "too_many_replays", e.to_string()),
            ReplayError::Corrupt(..) => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "corrupt", e.to_string()),
        }
    }
}

/// The largest JSON body the admin API reads (axum's default limit).
pub const MAX_JSON_BODY: usize = 2 << 20;

/// `Json<T>` whose rejections are [`ApiError`]s (`invalid_body`, with the
/// key that failed).
pub struct Body<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::Json::<T>::from_request(request, state).await {
            Ok(axum::Json(value)) => Ok(Body(value)),
            Err(rejection) => Err(json_rejection(rejection)),
        }
    }
}

/// A body that is not JSON, or not of the expected shape, is `400` like
/// every other invalid body (a missing `Content-Type` is `415`, a body
/// over the API's limit `413`).
fn json_rejection(rejection: JsonRejection) -> ApiError {
    if rejection.status() == StatusCode::UNSUPPORTED_MEDIA_TYPE {
        return ApiError::new(StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type", rejection.body_text());
    }
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        crate::metrics::metrics().admin_refused("payload_too_large");
        return ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("the body is over the admin API's limit of {} bytes", MAX_JSON_BODY),
        );
    }
    ApiError::bad_request("invalid_body", rejection.body_text())
}

/// `Query<T>` whose rejections are [`ApiError`]s (`invalid_query`).
pub struct Params<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for Params<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(value)) => Ok(Params(value)),
            Err(rejection) => Err(query_rejection(rejection)),
        }
    }
}

fn query_rejection(rejection: QueryRejection) -> ApiError {
    ApiError::bad_request("invalid_query", rejection.body_text())
}

/// `Path<T>` whose rejections are [`ApiError`]s (`invalid_path`): a path
/// segment that does not decode (bad percent-encoding, not UTF-8) is
/// answered like every other refusal.
pub struct Segments<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for Segments<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(value)) => Ok(Segments(value)),
            Err(rejection) => Err(path_rejection(rejection)),
        }
    }
}

fn path_rejection(rejection: PathRejection) -> ApiError {
    if rejection.status().is_server_error() {
        return ApiError::new(rejection.status(), "internal", rejection.body_text());
    }
    ApiError::bad_request("invalid_path", rejection.body_text())
}
