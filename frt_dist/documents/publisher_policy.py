"""A package's publisher-signature policy as the manifest states it: ``PublisherPolicy`` (the
``signature`` mode and who may sign), ``SignerPolicy`` (`kernels`' ``GitHubWorkflowPolicy``) and
`kernels`' default signers for ``kernels-community/*``. Value types only: judging a bundle against
them is ``frt_dist.provenance.publisher``'s job (docs/reference.md#publisher-signatures)."""

from __future__ import annotations

from ..base.record import dataclass

__all__ = ["SIGNATURE_MODES", "GITHUB_ISSUER", "KERNELS_COMMUNITY", "SignerPolicy", "PublisherPolicy", "NO_POLICY"]

SIGNATURE_MODES = ("optional", "required", "off")
GITHUB_ISSUER = "https://token.actions.githubusercontent.com"


@dataclass(frozen=True)
class SignerPolicy:
    """Who may sign: `kernels`' ``GitHubWorkflowPolicy`` (issuer + source repository + one of
    the build-signer workflow URIs). A workflow given without ``@<ref>`` accepts that workflow at
    any ref (a release workflow signs from each tag); with ``@<ref>`` it must match exactly, as
    `kernels` matches. ``source`` says where the policy came from (``package``, ``organisation``,
    ``kernels-default``)."""

    repository: str
    workflows: tuple[str, ...]
    issuer: str = GITHUB_ISSUER
    source: str = "package"

    def describe(self) -> str:
        return (f"issuer {self.issuer}, repository {self.repository}, workflow "
                + " | ".join(self.workflows))


# kernels 0.17.2 kernels/verify.py DEFAULT_POLICIES: the curated kernels-community build workflows
KERNELS_COMMUNITY = SignerPolicy(
    repository="https://github.com/huggingface/kernels-community",
    workflows=tuple(f"https://github.com/huggingface/kernels-community/.github/workflows/{w}@refs/heads/main"
                    for w in ("build.yaml", "build-mac.yaml", "build-windows.yaml", "sign-old-builds.yaml")),
    source="kernels-default")


@dataclass(frozen=True)
class PublisherPolicy:
    """A package's signature policy: ``signature`` is ``optional`` (a bundle, when present, must
    verify and match ``signer``), ``required`` (and a variant without one is refused) or ``off``
    (bundles are not read); ``signer`` is who may sign (``None``: any valid Sigstore identity)."""

    signature: str = "optional"
    signer: SignerPolicy | None = None

    @property
    def name(self) -> str:
        """What the lock records as the policy a signature was judged by."""
        return self.signer.source if self.signer else "none"


NO_POLICY = PublisherPolicy()
