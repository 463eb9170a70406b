"""The cage's policy at run time: the agent asks, the cage decides.

- `settings`: cage.yaml's `policy_api` section as the gateway takes it.
- `ceiling`: what may ever be granted without the operator (`policy_api.grantable`, the TTL
  and count caps, the names never granted) and a grant's scope.
- `grants`: the grants and the requests for them, the deciders (`rules`, `human`), expiry and
  revocation, which cut the connections opened under a grant; `grants.json` (the gateway
  alone writes it) and the policy in force (domains.json and the grants, `LivePolicy`).
- `denials`: the cage's recent refusals, as the agent may read them.
- `api`: the mitmproxy addon that serves the policy API at `agentcage.local`, inside the cage
  only, before the cage's own policy step.
- `channel`: the operator's way in (`agentcage cage grants ...`): request files in the cage's
  state directory, which the cage cannot reach, answered by the gateway.
"""
