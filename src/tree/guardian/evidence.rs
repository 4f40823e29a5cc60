//! What a recorded cgroup proves about its processes, for the guardian's own tree (after its
//! `DONE`, or once it is gone) and for the assessment of a recorded scope.
//!
//! Invariant: only the kernel's word counts: `populated 0`, or a removal the kernel allowed
//! (it refuses `rmdir` of a cgroup that holds a process or a child cgroup) inside a hierarchy
//! that is still mounted. A path that is not visible as a cgroup at all proves nothing.

use std::path::Path;

use crate::tree::cgroup::Scope;

/// What a recorded cgroup says about its processes now.
#[derive(Debug)]
pub enum CgroupEvidence {
    /// It reports `populated 0`, or it was removed from a cgroup hierarchy that is still
    /// mounted: the kernel refuses `rmdir` of a cgroup that holds a process or a child cgroup,
    /// so a removed one emptied first (the guardian removes its cgroup once it is empty).
    Empty,
    Populated(Scope),
    Unknown(String),
}

/// Reads the evidence of the cgroup at `path`.
pub fn cgroup_evidence(path: &Path) -> CgroupEvidence {
    let cgroup = Scope::at(path.into());
    if cgroup.exists() {
        return match cgroup.populated() {
            Ok(false) => CgroupEvidence::Empty,
            Ok(true) => CgroupEvidence::Populated(cgroup),
            Err(e) => CgroupEvidence::Unknown(e.to_string()),
        };
    }
    // Gone, or never visible here: only a removal inside a hierarchy that is still mounted
    // (its nearest surviving ancestor is a cgroup) says it emptied; an unmounted hierarchy,
    // another mount namespace or a path that never was a cgroup says nothing.
    let in_hierarchy = path
        .ancestors()
        .skip(1)
        .find(|a| a.is_dir())
        .is_some_and(|a| a.join("cgroup.procs").is_file());
    if in_hierarchy {
        CgroupEvidence::Empty
    } else {
        CgroupEvidence::Unknown("it is gone and no mounted cgroup hierarchy holds its path".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::cgroup::CgroupBase;

    /// Empty while `populated 0`, populated while a real process is in it, empty once removed
    /// from the mounted hierarchy; a path outside any cgroup hierarchy proves nothing.
    #[test]
    fn only_the_kernel_says_a_cgroup_is_empty() {
        let outside = tempfile::tempdir().unwrap();
        assert!(matches!(
            cgroup_evidence(&outside.path().join("gone")),
            CgroupEvidence::Unknown(_)
        ));
        let Ok(base) = CgroupBase::probe("procjournal-evidence-test") else {
            eprintln!("skipped the cgroup half: no usable cgroup v2 here");
            return;
        };
        let scope = base.create_scope("evidence").unwrap();
        assert!(matches!(
            cgroup_evidence(scope.path()),
            CgroupEvidence::Empty
        ));
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        std::fs::write(scope.path().join("cgroup.procs"), child.id().to_string()).unwrap();
        assert!(matches!(
            cgroup_evidence(scope.path()),
            CgroupEvidence::Populated(_)
        ));
        // The kernel refuses to remove it while it holds the process.
        assert!(scope.remove().is_err());
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(
            scope
                .wait_empty(std::time::Duration::from_secs(60))
                .unwrap()
        );
        scope.remove().unwrap();
        assert!(matches!(
            cgroup_evidence(scope.path()),
            CgroupEvidence::Empty
        ));
        let _ = std::fs::remove_dir(base.dir());
    }
}
