//! Who may do what: a role per user on each project and each registered model. Server admins
//! have every role; a user with no row of their own gets the server's default role; whoever
//! creates a project or a model is its admin.

use crate::db::{vals, Db};
use crate::{not_found, Error, MetaStore, Result};

/// What a user may do with a project (its runs, metrics, artifacts, checkpoints and sweeps) or a
/// registered model. Each role includes the ones before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// Not even told that it exists.
    None,
    Read,
    Write,
    /// Also grants roles to others and deletes.
    Admin,
}

impl Role {
    pub fn parse(field: &str, s: &str) -> Result<Role> {
        match s {
            "none" => Ok(Role::None),
            "read" => Ok(Role::Read),
            "write" => Ok(Role::Write),
            "admin" => Ok(Role::Admin),
            _ => Err(Error::Invalid {
                field: field.into(),
                reason: format!("a role is one of none, read, write, admin; got {s:?}"),
            }),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Role::None => "none",
            Role::Read => "read",
            Role::Write => "write",
            Role::Admin => "admin",
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The two kinds of things roles are given on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    Project,
    Model,
}

impl Scope {
    pub fn noun(self) -> &'static str {
        match self {
            Scope::Project => "project",
            Scope::Model => "model",
        }
    }

    fn members_table(self) -> &'static str {
        match self {
            Scope::Project => "project_members",
            Scope::Model => "model_members",
        }
    }

    fn id_column(self) -> &'static str {
        match self {
            Scope::Project => "project_id",
            Scope::Model => "model_id",
        }
    }

    fn id_by_name(self, db: &dyn Db, name: &str) -> Result<Option<i64>> {
        let sql = match self {
            Scope::Project => "SELECT id FROM projects WHERE name = ?1 AND deleted = 0",
            Scope::Model => "SELECT id FROM registered_models WHERE name = ?1",
        };
        db.row(sql, vals![name])?.map(|r| r.get(0)).transpose()
    }
}

/// The user a store call acts for, when the server checks keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor {
    pub user_id: i64,
    pub name: String,
    pub is_admin: bool,
    /// What the user gets on something they hold no role of their own on.
    pub default_role: Role,
}

/// Which projects (or models) a user may read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Visibility {
    All,
    Only(Vec<i64>),
    AllBut(Vec<i64>),
}

impl Visibility {
    pub fn allows(&self, id: i64) -> bool {
        match self {
            Visibility::All => true,
            Visibility::Only(ids) => ids.contains(&id),
            Visibility::AllBut(ids) => !ids.contains(&id),
        }
    }
}

fn member_role(db: &dyn Db, scope: Scope, id: i64, user_id: i64) -> Result<Option<Role>> {
    let sql = format!("SELECT role FROM {} WHERE {} = ?1 AND user_id = ?2", scope.members_table(), scope.id_column());
    let role: Option<String> = db.row(&sql, vals![id, user_id])?.map(|r| r.get(0)).transpose()?;
    role.map(|r| Role::parse("role", &r).map_err(|_| Error::Corrupt(format!("unknown role {r:?}")))).transpose()
}

pub(crate) fn role_in(db: &dyn Db, actor: &Actor, scope: Scope, id: i64) -> Result<Role> {
    if actor.is_admin {
        return Ok(Role::Admin);
    }
    Ok(member_role(db, scope, id, actor.user_id)?.unwrap_or(actor.default_role))
}

/// Refuses an actor whose role on a thing is below `need`: as not found when they may not even
/// read it, so its existence does not show; as forbidden otherwise. No actor: keys are off.
pub(crate) fn require_in(
    db: &dyn Db,
    actor: Option<&Actor>,
    scope: Scope,
    id: i64,
    name: &str,
    need: Role,
) -> Result<()> {
    let Some(actor) = actor else { return Ok(()) };
    let has = role_in(db, actor, scope, id)?;
    check(actor, scope, name, has, need)
}

/// The refusal, if any, of an actor holding `has` where `need` is needed.
pub fn check(actor: &Actor, scope: Scope, name: &str, has: Role, need: Role) -> Result<()> {
    if has >= need {
        Ok(())
    } else if has < Role::Read {
        Err(not_found(format!("{} {name:?}", scope.noun())))
    } else {
        Err(Error::Forbidden {
            field: scope.noun().into(),
            reason: format!(
                "{} has the {has} role on {} {name:?}; this needs {need} (a project admin can grant it: trainlog grant)",
                actor.name,
                scope.noun()
            ),
        })
    }
}

/// Makes the actor the admin of what they just created.
pub(crate) fn make_admin_in(db: &dyn Db, actor: Option<&Actor>, scope: Scope, id: i64) -> Result<()> {
    if let Some(actor) = actor {
        let (table, column) = (scope.members_table(), scope.id_column());
        let sql = format!(
            "INSERT INTO {table} ({column}, user_id, role) VALUES (?1, ?2, 'admin')
             ON CONFLICT ({column}, user_id) DO UPDATE SET role = 'admin'"
        );
        db.exec(&sql, vals![id, actor.user_id])?;
    }
    Ok(())
}

fn user_id(db: &dyn Db, name: &str) -> Result<i64> {
    db.row("SELECT id FROM users WHERE name = ?1", vals![name])?
        .ok_or_else(|| not_found(format!("user {name:?}")))?
        .get(0)
}

impl MetaStore {
    /// The id of a project or model by name.
    pub fn scope_id(&self, scope: Scope, name: &str) -> Result<i64> {
        self.read(|db| scope.id_by_name(db, name)?.ok_or_else(|| not_found(format!("{} {name:?}", scope.noun()))))
    }

    /// The role an actor holds on a project or model.
    pub fn role(&self, actor: &Actor, scope: Scope, id: i64) -> Result<Role> {
        self.read(|db| role_in(db, actor, scope, id))
    }

    /// Gives a user a role on a project or model, replacing the one they had.
    pub fn grant(&self, scope: Scope, name: &str, user: &str, role: Role) -> Result<()> {
        self.write(|tx| {
            let id = scope.id_by_name(tx, name)?.ok_or_else(|| not_found(format!("{} {name:?}", scope.noun())))?;
            let user_id = user_id(tx, user)?;
            let (table, column) = (scope.members_table(), scope.id_column());
            let sql = format!(
                "INSERT INTO {table} ({column}, user_id, role) VALUES (?1, ?2, ?3)
                 ON CONFLICT ({column}, user_id) DO UPDATE SET role = excluded.role"
            );
            tx.exec(&sql, vals![id, user_id, role.as_str()])?;
            crate::auth::bump_generation(tx)
        })
    }

    /// Takes a user's own role away; they get the default role again.
    pub fn revoke_role(&self, scope: Scope, name: &str, user: &str) -> Result<()> {
        self.write(|tx| {
            let id = scope.id_by_name(tx, name)?.ok_or_else(|| not_found(format!("{} {name:?}", scope.noun())))?;
            let user_id = user_id(tx, user)?;
            let sql =
                format!("DELETE FROM {} WHERE {} = ?1 AND user_id = ?2", scope.members_table(), scope.id_column());
            if tx.exec(&sql, vals![id, user_id])? == 0 {
                return Err(not_found(format!("a role of {user:?} on {} {name:?}", scope.noun())));
            }
            crate::auth::bump_generation(tx)
        })
    }

    /// The users holding a role of their own on a project or model, by name.
    pub fn members(&self, scope: Scope, name: &str) -> Result<Vec<(String, Role)>> {
        self.read(|db| {
            let id = scope.id_by_name(db, name)?.ok_or_else(|| not_found(format!("{} {name:?}", scope.noun())))?;
            let sql = format!(
                "SELECT u.name, m.role FROM {} m JOIN users u ON u.id = m.user_id WHERE m.{} = ?1 ORDER BY u.name",
                scope.members_table(),
                scope.id_column()
            );
            db.rows(&sql, vals![id])?
                .iter()
                .map(|r| {
                    let role: String = r.get(1)?;
                    let role =
                        Role::parse("role", &role).map_err(|_| Error::Corrupt(format!("unknown role {role:?}")))?;
                    Ok((r.get(0)?, role))
                })
                .collect()
        })
    }

    /// The projects or models an actor may read.
    pub fn visibility(&self, actor: &Actor, scope: Scope) -> Result<Visibility> {
        if actor.is_admin {
            return Ok(Visibility::All);
        }
        self.read(|db| {
            let readable = actor.default_role >= Role::Read;
            let sql = format!(
                "SELECT {} FROM {} WHERE user_id = ?1 AND (CASE WHEN role = 'none' THEN 1 ELSE 0 END) = ?2",
                scope.id_column(),
                scope.members_table()
            );
            let ids = db
                .rows(&sql, vals![actor.user_id, readable])?
                .iter()
                .map(|r| r.get(0))
                .collect::<Result<Vec<i64>>>()?;
            Ok(if readable { Visibility::AllBut(ids) } else { Visibility::Only(ids) })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trainlog_schema::ProjectName;

    fn actor(m: &MetaStore, name: &str, default_role: Role) -> Actor {
        let user = m.users().unwrap().into_iter().find(|u| u.name == name).unwrap();
        Actor { user_id: user.id, name: user.name, is_admin: user.is_admin, default_role }
    }

    #[test]
    fn roles_come_from_admin_rights_then_grants_then_the_default() {
        let dir = tempfile::tempdir().unwrap();
        let m = crate::test_store(dir.path());
        m.add_user("root", true).unwrap();
        m.add_user("ada", false).unwrap();
        m.add_user("bo", false).unwrap();
        let ada = actor(&m, "ada", Role::Read);
        let p = m.create_project(&ProjectName::parse("p", "vision").unwrap(), "", Some(&ada)).unwrap();
        assert_eq!(m.role(&ada, Scope::Project, p.id).unwrap(), Role::Admin, "the creator is its admin");
        let bo = actor(&m, "bo", Role::Read);
        assert_eq!(m.role(&bo, Scope::Project, p.id).unwrap(), Role::Read);
        assert_eq!(m.role(&actor(&m, "bo", Role::None), Scope::Project, p.id).unwrap(), Role::None);
        assert_eq!(m.role(&actor(&m, "root", Role::None), Scope::Project, p.id).unwrap(), Role::Admin);
        let before = m.auth_generation().unwrap();
        m.grant(Scope::Project, "vision", "bo", Role::None).unwrap();
        assert!(m.auth_generation().unwrap() > before, "a grant can take access away");
        assert_eq!(m.role(&bo, Scope::Project, p.id).unwrap(), Role::None);
        assert_eq!(m.visibility(&bo, Scope::Project).unwrap(), Visibility::AllBut(vec![p.id]));
        m.grant(Scope::Project, "vision", "bo", Role::Write).unwrap();
        assert_eq!(m.visibility(&actor(&m, "bo", Role::None), Scope::Project).unwrap(), Visibility::Only(vec![p.id]));
        assert_eq!(
            m.members(Scope::Project, "vision").unwrap(),
            vec![("ada".into(), Role::Admin), ("bo".into(), Role::Write)]
        );
        m.revoke_role(Scope::Project, "vision", "bo").unwrap();
        assert_eq!(m.role(&bo, Scope::Project, p.id).unwrap(), Role::Read);
        assert!(matches!(m.grant(Scope::Project, "vision", "nobody", Role::Read), Err(Error::NotFound { .. })));
        assert!(matches!(m.grant(Scope::Model, "nothing", "bo", Role::Read), Err(Error::NotFound { .. })));
        let refusal = check(&bo, Scope::Project, "vision", Role::Read, Role::Write);
        assert!(matches!(refusal, Err(Error::Forbidden { .. })));
        assert!(matches!(check(&bo, Scope::Project, "vision", Role::None, Role::Read), Err(Error::NotFound { .. })));
    }
}
