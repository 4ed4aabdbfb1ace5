//! The team's wire types: users, API keys and the members of projects and models.

use crate::wire::{text_schema, RoleName};
use serde::{Deserialize, Serialize};
use utoipa::openapi::schema::Schema;
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};

/// A user name: 1 to 64 characters from [A-Za-z0-9_.@-].
pub const USER_NAME: &str = "^[A-Za-z0-9_.@-]{1,64}$";
/// A key's id: 12 hex digits.
pub const KEY_ID: &str = "^[0-9a-f]{12}$";

/// A user's name, in the API document.
pub struct UserNameText;
impl PartialSchema for UserNameText {
    fn schema() -> RefOr<Schema> {
        text_schema(None, None, USER_NAME, "A user's name.")
    }
}
impl ToSchema for UserNameText {}

/// An API key's id, in the API document.
pub struct KeyIdText;
impl PartialSchema for KeyIdText {
    fn schema() -> RefOr<Schema> {
        text_schema(None, None, KEY_ID, "An API key's id: the 12 hex digits after `tl_`.")
    }
}
impl ToSchema for KeyIdText {}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetMember {
    pub role: RoleName,
}

#[derive(Serialize, ToSchema)]
pub struct Member {
    pub user: String,
    pub role: RoleName,
}

/// Users holding a role of their own; everyone else has `default_role` (server admins: admin).
#[derive(Serialize, ToSchema)]
pub struct MemberList {
    pub members: Vec<Member>,
    pub default_role: RoleName,
}

#[derive(Serialize, ToSchema)]
pub struct UserView {
    pub name: String,
    /// A server admin may do anything.
    pub admin: bool,
    /// Keys not revoked.
    pub active_keys: i64,
    /// Milliseconds since the Unix epoch.
    pub created_time: i64,
}

#[derive(Serialize, ToSchema)]
pub struct UserList {
    pub users: Vec<UserView>,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateUser {
    #[schema(schema_with = UserNameText::schema)]
    pub name: String,
    /// Make a server admin.
    #[serde(default)]
    pub admin: bool,
}

/// A new key: shown this once, stored only as a hash.
#[derive(Serialize, ToSchema)]
pub struct NewKeyView {
    pub user: String,
    pub key_id: String,
    pub key: String,
}

#[derive(Serialize, ToSchema)]
pub struct KeyView {
    pub id: String,
    pub user: String,
    pub created_time: i64,
    pub last_used_time: Option<i64>,
    pub revoked_time: Option<i64>,
}

#[derive(Serialize, ToSchema)]
pub struct KeyList {
    pub keys: Vec<KeyView>,
}

/// Who the request's key belongs to.
#[derive(Serialize, ToSchema)]
pub struct WhoAmI {
    /// Whether the server checks keys; when false there is no user.
    pub auth: bool,
    pub user: Option<String>,
    pub admin: bool,
    /// What users get on projects and models they hold no role of their own on.
    pub default_role: Option<RoleName>,
}
