"""Node Feature Discovery's rules, evaluated offline exactly as nfd-master evaluates them.

A port of node-feature-discovery (kubernetes-sigs/node-feature-discovery at commit
76e6cc8cc0d54b8bce037098b72611ffdf66ef5a, NFD_COMMIT): `model` reads the
nfd.k8s-sigs.io/v1alpha1 NodeFeature and NodeFeatureRule objects (api/nfd/v1alpha1/types.go),
`expression` the match operators (pkg/apis/nfd/nodefeaturerule/expression.go), `template`
the Go text/template subset that labelsTemplate and varsTemplate use
(pkg/apis/nfd/template/template.go), `rule` one rule's execution
(pkg/apis/nfd/nodefeaturerule/rule.go), and `master` what nfd-master makes of the rules'
outputs for one node: rule order, back-references, namespaces, filtering
(pkg/nfd-master/nfd-master.go, pkg/apis/nfd/validate/validate.go).
"""

from __future__ import annotations

from typing import Final

NFD_REPOSITORY: Final = "kubernetes-sigs/node-feature-discovery"
NFD_COMMIT: Final = "76e6cc8cc0d54b8bce037098b72611ffdf66ef5a"
# Where the published deployment (deployment/overlays/default, the Helm chart's default
# release namespace) runs nfd-master and its workers.
NFD_NAMESPACE: Final = "node-feature-discovery"
