//! Counting a connection's requests in flight: from the moment the router is called until the
//! response's body has ended or been dropped (a stream counts while it streams, a request counts
//! while it waits in the queue), so the idle rules of [`super::conn`] never cut a connection
//! that is waiting for its answer. A request whose body is still arriving is counted apart
//! ([`Activity::receiving`]): under pressure such a connection may be cut.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::response::Response;
use axum::Router;
use http_body::Frame;

use super::conn::Activity;

/// The router, counting its requests on a connection's [`Activity`].
#[derive(Clone)]
pub struct InFlight {
    router: Router,
    act: Arc<Activity>,
}

impl InFlight {
    pub fn new(router: Router, act: Arc<Activity>) -> InFlight {
        InFlight { router, act }
    }
}

/// One request in flight; dropping it ends the count.
struct Guard(Arc<Activity>);

impl Guard {
    fn new(act: &Arc<Activity>) -> Guard {
        act.in_flight.fetch_add(1, Ordering::Relaxed);
        Guard(Arc::clone(act))
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A request body still arriving; dropping it (at the body's end) ends the count.
struct Receiving(Arc<Activity>);

impl Receiving {
    fn new(act: &Arc<Activity>) -> Receiving {
        act.receiving.fetch_add(1, Ordering::Relaxed);
        Receiving(Arc::clone(act))
    }
}

impl Drop for Receiving {
    fn drop(&mut self) {
        self.0.receiving.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A response body that holds a value until the body has ended (or failed, or is dropped
/// unfinished) and drops it then: the in-flight [`Guard`] here, the request-log line in
/// [`super::reqlog`].
pub(super) struct HoldUntilEnd<T> {
    body: Body,
    held: Option<T>,
}

impl<T: Send + Unpin + 'static> HoldUntilEnd<T> {
    pub(super) fn body(body: Body, held: T) -> Body {
        Body::new(HoldUntilEnd {
            body,
            held: Some(held),
        })
    }
}

impl<T: Unpin> http_body::Body for HoldUntilEnd<T> {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let r = Pin::new(&mut self.body).poll_frame(cx);
        if matches!(r, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) {
            self.held = None;
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

type Pending = Pin<Box<dyn Future<Output = Result<Response, std::convert::Infallible>> + Send>>;

impl<B> tower_service::Service<Request<B>> for InFlight
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    type Response = Response;
    type Error = std::convert::Infallible;
    type Future = Pending;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let guard = Guard::new(&self.act);
        let req = req.map(|b| {
            let body = Body::new(b);
            if http_body::Body::is_end_stream(&body) {
                body
            } else {
                HoldUntilEnd::body(body, Receiving::new(&self.act))
            }
        });
        let mut router = self.router.clone();
        Box::pin(async move {
            let res = tower_service::Service::call(&mut router, req).await?;
            Ok(res.map(|body| HoldUntilEnd::body(body, guard)))
        })
    }
}
