package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentrunner/runner/internal/errdefs"
)

// needed are the verbs the provider uses in its namespace; a Role that
// lacks one fails the first turn that needs it, so the boot check asks
// for each up front.
var needed = []authorizationv1.ResourceAttributes{
	{Resource: "pods", Verb: "create"},
	{Resource: "pods", Verb: "get"},
	{Resource: "pods", Verb: "list"},
	{Resource: "pods", Verb: "watch"},
	{Resource: "pods", Verb: "delete"},
	// The portforward dial is an upgraded POST: the create verb.
	{Resource: "pods", Subresource: "portforward", Verb: "create"},
	{Group: "networking.k8s.io", Resource: "networkpolicies", Verb: "create"},
	{Group: "networking.k8s.io", Resource: "networkpolicies", Verb: "get"},
	{Group: "networking.k8s.io", Resource: "networkpolicies", Verb: "update"},
	{Group: "networking.k8s.io", Resource: "networkpolicies", Verb: "delete"},
}

// neededParking are the verbs parking adds (Config.StorageClass).
var neededParking = []authorizationv1.ResourceAttributes{
	{Resource: "persistentvolumeclaims", Verb: "create"},
	{Resource: "persistentvolumeclaims", Verb: "get"},
	{Resource: "persistentvolumeclaims", Verb: "list"},
	{Resource: "persistentvolumeclaims", Verb: "delete"},
}

// CheckAccess is the boot check: it asks the API server, with
// SelfSubjectAccessReviews, whether the runner may do everything the
// provider does in its namespace, and names each verb it may not.
func (p *Provider) CheckAccess(ctx context.Context) error {
	var missing []string
	verbs := needed
	if p.parking() {
		verbs = append(slices.Clone(needed), neededParking...)
	}
	for _, ra := range verbs {
		ra.Namespace = p.cfg.Namespace
		r, err := p.client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &ra},
		}, metav1.CreateOptions{})
		if err != nil {
			return p.apiErr(fmt.Errorf("kubernetes: access review in namespace %s: %w", p.cfg.Namespace, err))
		}
		if !r.Status.Allowed {
			res := ra.Resource
			if ra.Subresource != "" {
				res += "/" + ra.Subresource
			}
			if ra.Group != "" {
				res += "." + ra.Group
			}
			missing = append(missing, ra.Verb+" "+res)
		}
	}
	if len(missing) > 0 {
		return errdefs.With(errdefs.ErrInvalid, errors.New("kubernetes: the runner may not "+strings.Join(missing, ", ")+
			" in namespace "+p.cfg.Namespace+"; grant them in its Role (the Helm chart's rbac.yaml lists them)"))
	}
	return nil
}
