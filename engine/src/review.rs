//! The `AdmissionReview` wire format (`admission.k8s.io/v1` and `v1beta1`): parsing a request
//! body and building the response document. Pure: bytes or values in, values out.

use std::collections::BTreeMap;

use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::json::RawDocument;
use crate::truncate::{truncate_bytes, truncate_chars};

/// The API versions the webhook answers; a review is answered in the version it came in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReviewVersion {
    V1,
    V1Beta1,
}

impl ReviewVersion {
    pub fn api_version(self) -> &'static str {
        match self {
            ReviewVersion::V1 => "admission.k8s.io/v1",
            ReviewVersion::V1Beta1 => "admission.k8s.io/v1beta1",
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct GroupVersionKind {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub kind: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct GroupVersionResource {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub resource: String,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct UserInfo {
    #[serde(default)]
    pub username: String,
    #[serde(default)]
    pub uid: String,
    #[serde(default)]
    pub groups: Vec<String>,
}

/// `request` of an AdmissionReview: the fields the webhook uses. `O` is what the objects are
/// read as: parsed documents, or (the agent's hot path) the raw text of the body.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionRequest<O = Value> {
    pub uid: String,
    #[serde(default)]
    pub kind: GroupVersionKind,
    #[serde(default)]
    pub resource: GroupVersionResource,
    #[serde(default)]
    pub sub_resource: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub namespace: Option<String>,
    pub operation: String,
    #[serde(default)]
    pub user_info: UserInfo,
    #[serde(default = "none")]
    pub object: Option<O>,
    #[serde(default = "none")]
    pub old_object: Option<O>,
    #[serde(default)]
    pub dry_run: Option<bool>,
}

fn none<O>() -> Option<O> {
    None
}

impl<O> AdmissionRequest<O> {
    pub fn namespace(&self) -> &str {
        self.namespace.as_deref().unwrap_or("")
    }

    pub fn name(&self) -> &str {
        self.name.as_deref().unwrap_or("")
    }

    pub fn sub_resource(&self) -> &str {
        self.sub_resource.as_deref().unwrap_or("")
    }

    /// The same request with `object` and `old_object` in place of its own.
    pub fn with_objects<P>(self, object: Option<P>, old_object: Option<P>) -> AdmissionRequest<P> {
        AdmissionRequest {
            object,
            old_object,
            uid: self.uid,
            kind: self.kind,
            resource: self.resource,
            sub_resource: self.sub_resource,
            name: self.name,
            namespace: self.namespace,
            operation: self.operation,
            user_info: self.user_info,
            dry_run: self.dry_run,
        }
    }

    /// The same request, its objects converted by `convert`.
    pub fn try_map_objects<P, E>(
        mut self,
        mut convert: impl FnMut(O) -> Result<P, E>,
    ) -> Result<AdmissionRequest<P>, E> {
        let object = self.object.take().map(&mut convert).transpose()?;
        let old_object = self.old_object.take().map(&mut convert).transpose()?;
        Ok(self.with_objects(object, old_object))
    }

    /// The request's own fields, without its objects (for what outlives the body they are
    /// read from).
    pub fn without_objects(&self) -> AdmissionRequest {
        AdmissionRequest {
            uid: self.uid.clone(),
            kind: self.kind.clone(),
            resource: self.resource.clone(),
            sub_resource: self.sub_resource.clone(),
            name: self.name.clone(),
            namespace: self.namespace.clone(),
            operation: self.operation.clone(),
            user_info: self.user_info.clone(),
            object: None,
            old_object: None,
            dry_run: self.dry_run,
        }
    }
}

/// A review read by [`parse_review_raw`] that owns its objects' text: what a review keeps when
/// something is awaited between its parse and its evaluation (a `/scale` review waits for its
/// parent's labels). Its objects are read from the same text again, never parsed again.
#[derive(Debug)]
pub struct HeldReview {
    version: ReviewVersion,
    uid: String,
    request: Result<AdmissionRequest<String>, String>,
}

impl ParsedReview<RawDocument<'_>> {
    /// The review, owning its objects' text (a copy of it, of the body's size at most).
    pub fn hold(self) -> HeldReview {
        let request = self.request.map(|request| {
            let text =
                |object: &Option<RawDocument<'_>>| object.as_ref().map(|o| o.text().to_owned());
            let (object, old_object) = (text(&request.object), text(&request.old_object));
            request.with_objects(object, old_object)
        });
        HeldReview {
            version: self.version,
            uid: self.uid,
            request,
        }
    }
}

impl HeldReview {
    /// The review as [`parse_review_raw`] read it.
    pub fn review(&self) -> ParsedReview<RawDocument<'_>> {
        let request = self.request.as_ref().map_err(Clone::clone).map(|request| {
            let object = request.object.as_deref().map(RawDocument::read_before);
            let old_object = request.old_object.as_deref().map(RawDocument::read_before);
            request.without_objects().with_objects(object, old_object)
        });
        ParsedReview {
            version: self.version,
            uid: self.uid.clone(),
            request,
        }
    }
}

/// Why a body is not an AdmissionReview at all (answered with HTTP 400 and a plain message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NotAReview(pub String);

/// A body that is an AdmissionReview. `request` is `Err` with a reason when the review has no
/// usable request; that is answered inside an AdmissionReview with code 400.
#[derive(Debug)]
pub struct ParsedReview<O = Value> {
    pub version: ReviewVersion,
    /// The request's uid where one could be read, to echo even for a malformed request.
    pub uid: String,
    pub request: Result<AdmissionRequest<O>, String>,
}

/// How many levels a review wraps its objects in: the review, then `request`.
pub const REVIEW_LEVELS: usize = 2;

/// Values quoted in "not an AdmissionReview" messages are cut to this many characters.
const QUOTED_CHARS: usize = 64;
/// A malformed request's reason is cut to this many bytes.
const MALFORMED_REASON_BYTES: usize = 1024;
/// The longest `request.uid` answered (reference §5). The API server sends a UUID (36 bytes)
/// and takes an answer only when it carries the same uid back whole, so a longer one is
/// refused rather than echoed (a 2 MiB uid would make a 2 MiB answer) or cut (an answer the API
/// server would reject anyway).
pub const MAX_UID_BYTES: usize = 128;

/// Parses a request body, its objects into documents. Reads the body as [`parse_review_raw`]
/// does, so both accept and refuse the same bodies with the same reasons.
pub fn parse_review(body: &[u8]) -> Result<ParsedReview, NotAReview> {
    let raw = parse_review_raw(body)?;
    let request = raw.request.and_then(|request| {
        request
            .try_map_objects(|object| serde_json::from_str::<Value>(object.text()))
            .map_err(malformed)
    });
    Ok(ParsedReview {
        version: raw.version,
        uid: raw.uid,
        request,
    })
}

/// Parses a request body, keeping the objects as the body's own text: the whole body is
/// validated, but only the envelope and the request's small fields are built, so the cost of
/// a decision does not begin with two documents of the objects (the agent's hot path). A key
/// repeated in the envelope or the request is refused as malformed: which one counts would be
/// a guess (as for the API server's own strict decoding).
pub fn parse_review_raw(body: &[u8]) -> Result<ParsedReview<RawDocument<'_>>, NotAReview> {
    let parsed = parse_review_any_uid(body)?;
    check_uid(&parsed.uid)?;
    Ok(parsed)
}

/// A uid the agent can echo: at most [`MAX_UID_BYTES`].
fn check_uid(uid: &str) -> Result<(), NotAReview> {
    if uid.len() <= MAX_UID_BYTES {
        return Ok(());
    }
    Err(NotAReview(format!(
        "request.uid is {} bytes long; at most {MAX_UID_BYTES} are answered (the API server sends a 36-character UUID)",
        uid.len()
    )))
}

/// [`parse_review_raw`] before the uid's length is checked. A well-formed review is read in
/// one pass of serde_json, which validates the whole body and keeps the objects as their text;
/// only a body it refuses is read again, in parts, to say exactly what is wrong.
fn parse_review_any_uid(body: &[u8]) -> Result<ParsedReview<RawDocument<'_>>, NotAReview> {
    // Before anything walks it: the objects are read lazily and recursively (reference §5).
    // The review holds its objects two levels down (`request`, `object`): an object the API
    // server accepted, at most MAX_NESTING deep, is answered. (A count of the brackets, for
    // any review that has fewer than the limit.)
    crate::nesting::check_json_wrapping(body, REVIEW_LEVELS)
        .map_err(|e| NotAReview(format!("the AdmissionReview's request is {e}")))?;
    let first = body
        .iter()
        .find(|b| !matches!(b, b' ' | b'\n' | b'\r' | b'\t'));
    if first != Some(&b'{') {
        // Valid JSON that is not an object says so (a derived struct would read a list).
        serde_json::from_slice::<IgnoredAny>(body).map_err(not_json)?;
        return Err(not_an_object());
    }
    match serde_json::from_slice::<Envelope<'_, AdmissionRequest<RawDocument<'_>>>>(body) {
        Ok(Envelope {
            kind,
            api_version,
            request: Some(request),
        }) => Ok(ParsedReview {
            version: review_version(&raw_text(kind), &raw_text(api_version))?,
            uid: request.uid.clone(),
            request: Ok(request),
        }),
        _ => parse_review_in_parts(body),
    }
}

/// The top level of a review: `request` read as `R` (the request, or its text to read on its
/// own); `kind` and `apiVersion` are checked by [`review_version`].
#[derive(Deserialize)]
struct Envelope<'b, R> {
    #[serde(borrow, default)]
    kind: Option<&'b RawValue>,
    #[serde(borrow, default, rename = "apiVersion")]
    api_version: Option<&'b RawValue>,
    #[serde(default = "none")]
    request: Option<R>,
}

fn not_json(e: serde_json::Error) -> NotAReview {
    NotAReview(format!("request body is not valid JSON: {e}"))
}

/// A string of the envelope, or empty.
fn raw_text(raw: Option<&RawValue>) -> String {
    raw.and_then(|r| serde_json::from_str::<String>(r.get()).ok())
        .unwrap_or_default()
}

/// [`parse_review_raw`] of a body that is not a well-formed review: the envelope first, then
/// the request, each with its own error.
fn parse_review_in_parts(body: &[u8]) -> Result<ParsedReview<RawDocument<'_>>, NotAReview> {
    /// Only the uid, for a request that is otherwise malformed.
    #[derive(Deserialize)]
    struct Uid {
        #[serde(default)]
        uid: Option<Value>,
    }

    let envelope: Envelope<'_, &RawValue> = serde_json::from_slice(body).map_err(not_json)?;
    let version = review_version(&raw_text(envelope.kind), &raw_text(envelope.api_version))?;
    let request = match envelope.request {
        None => {
            return Ok(ParsedReview {
                version,
                uid: String::new(),
                request: Err("AdmissionReview has no request".into()),
            });
        }
        Some(request) => request,
    };
    let request = serde_json::from_str::<AdmissionRequest<RawDocument<'_>>>(request.get())
        .map_err(|e| (e, request));
    let (uid, request) = match request {
        Ok(parsed) => (parsed.uid.clone(), Ok(parsed)),
        Err((e, raw)) => {
            let uid = serde_json::from_str::<Uid>(raw.get())
                .ok()
                .and_then(|u| u.uid)
                .and_then(|u| u.as_str().map(str::to_owned))
                .unwrap_or_default();
            (uid, Err(malformed(e)))
        }
    };
    Ok(ParsedReview {
        version,
        uid,
        request,
    })
}

/// A malformed request's reason, bounded: serde quotes a wrong-typed string whole (reference §5).
fn malformed(e: serde_json::Error) -> String {
    truncate_bytes(
        &format!("AdmissionReview request is malformed: {e}"),
        MALFORMED_REASON_BYTES,
    )
}

fn not_an_object() -> NotAReview {
    NotAReview("request body is not an AdmissionReview: expected a JSON object".into())
}

/// The review's version from its `kind` and `apiVersion`.
fn review_version(kind: &str, api_version: &str) -> Result<ReviewVersion, NotAReview> {
    if kind != "AdmissionReview" {
        return Err(NotAReview(format!(
            "request body is not an AdmissionReview: kind is {:?}, expected \"AdmissionReview\"",
            truncate_chars(kind, QUOTED_CHARS)
        )));
    }
    match api_version {
        "admission.k8s.io/v1" => Ok(ReviewVersion::V1),
        "admission.k8s.io/v1beta1" => Ok(ReviewVersion::V1Beta1),
        other => Err(NotAReview(format!(
            "unsupported AdmissionReview apiVersion {:?}: expected admission.k8s.io/v1 or admission.k8s.io/v1beta1",
            truncate_chars(other, QUOTED_CHARS)
        ))),
    }
}

/// The request uid of a review body, read without parsing the rest: the keys before
/// `request.uid` are skipped and the scan stops at the uid (the API server writes it first), so
/// a body of any size costs a few microseconds. For answering a request that could not be
/// decided in time with its uid; `None` also for a uid longer than [`MAX_UID_BYTES`].
pub fn peek_uid(body: &[u8]) -> Option<String> {
    use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, Visitor};
    use std::fmt;

    /// Stops the scan once the uid is in `found`.
    struct Review<'f>(&'f mut Option<String>);
    impl<'de> Visitor<'de> for Review<'_> {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an AdmissionReview")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                if key == "request" {
                    return map.next_value_seed(Request(self.0));
                }
                map.next_value::<IgnoredAny>()?;
            }
            Ok(())
        }
    }

    struct Request<'f>(&'f mut Option<String>);
    impl<'de> DeserializeSeed<'de> for Request<'_> {
        type Value = ();
        fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
            deserializer.deserialize_map(self)
        }
    }
    impl<'de> Visitor<'de> for Request<'_> {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a request")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                if key == "uid" {
                    *self.0 = Some(map.next_value()?);
                    // Nothing after the uid is needed: stop here.
                    return Err(de::Error::custom("uid found"));
                }
                map.next_value::<IgnoredAny>()?;
            }
            Ok(())
        }
    }

    let mut found = None;
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let _ = serde::Deserializer::deserialize_map(&mut deserializer, Review(&mut found));
    // A uid too long to answer with is no uid (reference §5).
    found.filter(|uid: &String| check_uid(uid).is_ok())
}

/// Why an UPDATE review cannot be built from two objects.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BuildError(pub String);

/// The `admission.k8s.io/v1` AdmissionReview the API server sends for an UPDATE of `old` into
/// `new` by `user`.
pub fn update_review(old: Value, new: Value, user: &str, uid: &str) -> Result<Value, BuildError> {
    let text = |v: &Value, pointer: &str| {
        v.pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let api_version = text(&new, "/apiVersion");
    let kind = text(&new, "/kind");
    if kind.is_empty() || api_version.is_empty() {
        return Err(BuildError(
            "the new object has no apiVersion or kind".into(),
        ));
    }
    if text(&old, "/kind") != kind || text(&old, "/apiVersion") != api_version {
        return Err(BuildError(format!(
            "the old object is a {} {:?} and the new one a {api_version} {kind:?}; both must be the same kind",
            text(&old, "/apiVersion"),
            text(&old, "/kind")
        )));
    }
    if text(&old, "/metadata/name") != text(&new, "/metadata/name") {
        return Err(BuildError(format!(
            "the old object is named {:?} and the new one {:?}; an update keeps the name",
            text(&old, "/metadata/name"),
            text(&new, "/metadata/name")
        )));
    }
    let (group, version) = match api_version.split_once('/') {
        Some((group, version)) => (group.to_owned(), version.to_owned()),
        None => (String::new(), api_version.clone()),
    };
    let gvk = serde_json::json!({"group": group, "version": version, "kind": kind});
    let gvr = serde_json::json!({"group": group, "version": version, "resource": crate::manifests::resource_of(&kind)});
    Ok(serde_json::json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": gvk,
            "resource": gvr,
            "requestKind": gvk,
            "requestResource": gvr,
            "name": text(&new, "/metadata/name"),
            "namespace": text(&new, "/metadata/namespace"),
            "operation": "UPDATE",
            "userInfo": {"username": user, "groups": ["system:authenticated"]},
            "object": new,
            "oldObject": old,
            "dryRun": false
        }
    }))
}

/// `metav1.Status` as the webhook fills it in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResponseStatus {
    pub status: &'static str,
    pub code: u16,
    /// `Forbidden` on a denial (kubectl then prints `Error from server (Forbidden): …`, as for
    /// Gatekeeper and Kyverno), `BadRequest`, `InternalError`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'static str>,
    pub message: String,
}

/// `response` of an AdmissionReview.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionResponse {
    pub uid: String,
    pub allowed: bool,
    pub status: ResponseStatus,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub audit_annotations: BTreeMap<String, String>,
}

impl AdmissionResponse {
    /// A request that cannot be judged (code 400).
    pub fn bad_request(uid: &str, message: impl Into<String>) -> Self {
        Self {
            uid: uid.to_owned(),
            allowed: false,
            status: ResponseStatus {
                status: "Failure",
                code: 400,
                reason: Some("BadRequest"),
                message: message.into(),
            },
            warnings: Vec::new(),
            audit_annotations: BTreeMap::new(),
        }
    }

    /// An internal failure (code 500); the webhook's failurePolicy decides.
    pub fn internal_error(uid: &str, message: impl Into<String>) -> Self {
        Self {
            status: ResponseStatus {
                status: "Failure",
                code: 500,
                reason: Some("InternalError"),
                message: message.into(),
            },
            ..Self::bad_request(uid, "")
        }
    }

    /// The whole AdmissionReview document carrying this response.
    pub fn into_review(self, version: ReviewVersion) -> Value {
        // Strings, booleans, numbers and maps of strings: nothing here can fail to serialize.
        serde_json::to_value(self.review(version)).unwrap_or_default()
    }

    /// [`Self::into_review`] as the text of the answer, written straight from the response
    /// (the same bytes; no document is built on the way).
    pub fn encode_review(&self, version: ReviewVersion) -> Vec<u8> {
        serde_json::to_vec(&self.review(version)).unwrap_or_default()
    }

    fn review(&self, version: ReviewVersion) -> Review<'_> {
        Review {
            api_version: version.api_version(),
            kind: "AdmissionReview",
            response: self,
        }
    }
}

/// An AdmissionReview carrying a response: what the webhook answers.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Review<'r> {
    api_version: &'static str,
    kind: &'static str,
    response: &'r AdmissionResponse,
}

#[cfg(test)]
#[path = "review_tests.rs"]
mod tests;
