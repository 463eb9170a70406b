"""The agent container's seccomp profile (OCI form, for a kubelet's Localhost profiles).

A cage on one host refuses what this refuses: the kernel interfaces of backends/seccomp.py's
filter (key management, io_uring, bpf, module loading and the rest), the terminal-injection
ioctls, and new user namespaces (bwrap --disable-userns there; here unshare and clone with
CLONE_NEWUSER, and clone3, whose flags seccomp cannot read, answered ENOSYS so that libc falls
back to clone). A cluster's RuntimeDefault is the runtime's profile, which differs: containerd's
refuses new user namespaces without CAP_SYS_ADMIN, CRI-O's and podman's allow them. So the
export names this profile by default; the nodes need it at KUBELET_PATH.
"""

from __future__ import annotations

import errno
import json

from agentcage.backends.seccomp import DENIED

PROFILE = "agentcage/agent-v1.json"  # localhostProfile: relative to the kubelet's seccomp root
KUBELET_PATH = f"/var/lib/kubelet/seccomp/{PROFILE}"
CLONE_NEWUSER = 0x10000000
TIOCSTI, TIOCLINUX = 0x5412, 0x541C


def _masked(index: int, bits: int) -> dict:
    return {"index": index, "value": bits, "valueTwo": bits, "op": "SCMP_CMP_MASKED_EQ"}


def profile() -> dict:
    eperm = {"action": "SCMP_ACT_ERRNO", "errnoRet": errno.EPERM}
    return {
        "defaultAction": "SCMP_ACT_ALLOW",
        # a syscall of any other architecture (i386's int 0x80, x32) meets the runtime's
        # action for a foreign architecture: it is killed
        "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_AARCH64"],
        "syscalls": [
            {"names": sorted(DENIED), **eperm},
            {"names": ["unshare"], **eperm, "args": [_masked(0, CLONE_NEWUSER)]},
            {"names": ["clone"], **eperm, "args": [_masked(0, CLONE_NEWUSER)]},
            {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": errno.ENOSYS},
            *({"names": ["ioctl"], **eperm,
               "args": [{"index": 1, "value": request, "op": "SCMP_CMP_EQ"}]}
              for request in (TIOCSTI, TIOCLINUX)),
        ],
    }


def profile_text() -> str:
    return json.dumps(profile(), indent=2) + "\n"
