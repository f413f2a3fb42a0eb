# First, before any other import of ours or of the pack: a sibling worker of the same user must
# never take this worker's descriptors (pidfd_getfd) or ptrace it (docs/security.md).
from comfy_airlock import _native

_native.forbid_same_user_access()

from comfy_airlock.worker.runtime import main  # noqa: E402

main()
