"""Role-based access control for local clusters, as the Kubernetes RBAC authorizer does it.

- `requestinfo`: the verb, resource and namespace of an HTTP request (kube-apiserver's
  request-info resolver);
- `authorizer`: the decision over Roles, ClusterRoles and their bindings (pure);
- `escalation`: "may this user grant these rules" for RBAC writes (the `escalate`/`bind` checks);
- `impersonation`: the `Impersonate-*` headers and the checks they need;
- `policy`: the default roles and bindings every cluster starts with;
- `index`: the RBAC objects in memory, kept current from the store's change stream;
- `aggregation`: the controller that fills ClusterRoles that have an `aggregationRule`;
- `reviews`: SubjectAccessReview and friends, SelfSubjectReview;
- `enforcer`: how the API server uses all of the above.
"""
