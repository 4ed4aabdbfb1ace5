//! Artifact bytes in the object store: streamed uploads (one put for small files, multipart
//! with bounded parts in flight for large ones) that compute their sha256 on the way, and
//! streamed downloads. Object layout: `projects/{project_id}/artifacts/{run_id}/{path}`.

use crate::{Error, Result};
use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload, WriteMultipart};
use std::sync::Arc;
use trainlog_schema::{ArtifactPath, RunId};

/// Size of one part of a multipart upload; files smaller than this go up in one request.
pub const PART_BYTES: usize = 8 << 20;
/// Parts uploading at once: what an upload holds in memory is about this many parts.
pub const PARTS_IN_FLIGHT: usize = 4;

/// What an upload stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Uploaded {
    pub size: u64,
    pub sha256: String,
}

#[derive(Clone)]
pub struct ArtifactStore {
    objects: Arc<dyn ObjectStore>,
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl ArtifactStore {
    pub(crate) fn new(objects: Arc<dyn ObjectStore>) -> Self {
        Self { objects }
    }

    pub fn location(project_id: i64, run: &RunId, path: &ArtifactPath) -> Result<ObjectPath> {
        ObjectPath::parse(format!("projects/{project_id}/artifacts/{run}/{path}"))
            .map_err(|e| Error::Config(format!("artifact path {path}: {e}")))
    }

    /// Streams `body` into the object at `location`. A failed body or upload leaves nothing.
    pub async fn upload<S, E>(&self, location: &ObjectPath, mut body: S) -> Result<Uploaded>
    where
        S: Stream<Item = std::result::Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        let mut hasher = ring::digest::Context::new(&ring::digest::SHA256);
        let mut size = 0u64;
        let mut head = BytesMut::new();
        // Small files: one put.
        let mut next = None;
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| Error::Body(e.to_string()))?;
            hasher.update(&chunk);
            size += chunk.len() as u64;
            if head.len() + chunk.len() > PART_BYTES {
                next = Some(chunk);
                break;
            }
            head.extend_from_slice(&chunk);
        }
        let Some(first_over) = next else {
            self.objects.put(location, PutPayload::from_bytes(head.freeze())).await?;
            return Ok(Uploaded { size, sha256: hex(hasher.finish().as_ref()) });
        };
        let upload = self.objects.put_multipart(location).await?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_BYTES);
        writer.put(head.freeze());
        writer.put(first_over);
        let outcome: Result<()> = async {
            while let Some(chunk) = body.next().await {
                let chunk = chunk.map_err(|e| Error::Body(e.to_string()))?;
                hasher.update(&chunk);
                size += chunk.len() as u64;
                writer.wait_for_capacity(PARTS_IN_FLIGHT).await?;
                writer.put(chunk);
            }
            Ok(())
        }
        .await;
        match outcome {
            Ok(()) => {
                writer.finish().await?;
                Ok(Uploaded { size, sha256: hex(hasher.finish().as_ref()) })
            }
            Err(e) => {
                let _ = writer.abort().await;
                Err(e)
            }
        }
    }

    /// The object's size as stored, and a stream of its bytes.
    pub async fn download(
        &self,
        location: &ObjectPath,
    ) -> Result<(u64, impl Stream<Item = Result<Bytes>> + Send + 'static)> {
        let got = self.objects.get(location).await?;
        let size = got.meta.size;
        Ok((size, got.into_stream().map(|r| r.map_err(Error::from))))
    }

    pub async fn delete(&self, location: &ObjectPath) -> Result<()> {
        match self.objects.delete(location).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn small_and_multipart_uploads_round_trip_with_their_sha256() {
        let dir = tempfile::tempdir().unwrap();
        let store = ArtifactStore::new(crate::objects::open(None, dir.path()).unwrap().store);
        for size in [0usize, 1000, PART_BYTES * 2 + 12345] {
            let data: Vec<u8> = (0..size).map(|i| (i * 31 % 251) as u8).collect();
            let chunks: Vec<std::result::Result<Bytes, String>> =
                data.chunks(65536).map(|c| Ok(Bytes::copy_from_slice(c))).collect();
            let location = ObjectPath::from(format!("a/{size}.bin"));
            let up = store.upload(&location, futures::stream::iter(chunks)).await.unwrap();
            assert_eq!(up.size, size as u64);
            assert_eq!(up.sha256, hex(ring::digest::digest(&ring::digest::SHA256, &data).as_ref()));
            let mut back = Vec::new();
            let (stored_size, s) = store.download(&location).await.unwrap();
            assert_eq!(stored_size, size as u64);
            let mut s = Box::pin(s);
            while let Some(c) = s.next().await {
                back.extend_from_slice(&c.unwrap());
            }
            assert_eq!(back, data);
        }
        assert_eq!(
            hex(ring::digest::digest(&ring::digest::SHA256, b"abc").as_ref()),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[tokio::test]
    async fn a_failing_body_leaves_no_object() {
        let dir = tempfile::tempdir().unwrap();
        let store = ArtifactStore::new(crate::objects::open(None, dir.path()).unwrap().store);
        let big = Bytes::from(vec![7u8; PART_BYTES]);
        let chunks: Vec<std::result::Result<Bytes, String>> =
            vec![Ok(big.clone()), Ok(big), Err("client went away".into())];
        let location = ObjectPath::from("a/broken.bin");
        assert!(store.upload(&location, futures::stream::iter(chunks)).await.is_err());
        assert!(store.download(&location).await.is_err());
    }
}
