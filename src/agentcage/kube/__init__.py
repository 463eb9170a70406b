"""The cage as Kubernetes objects (`agentcage export k8s`), and the gateway's side of that pod.

The shape is the same-pod egress sidecar: the agent's container and the gateway's share the
pod's one network namespace. An init container loads an nftables ruleset into it (podnet.py)
that redirects every TCP connection and DNS query of every uid but the gateway's to the
gateway, drops the rest and all of IPv6; the gateway runs as a native sidecar (sidecar.py) with
the real keys from a Secret mounted into its container alone; the agent's container gets
placeholders and the cage's public CA certificate. layout.py says where everything is in the
pod, pod.py builds the pod's template, objects.py the objects around it (ConfigMap, Secret,
NetworkPolicy; Pod, Deployment or agent-sandbox's kinds), export.py writes them out.
"""
