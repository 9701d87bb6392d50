package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// kcmUser is the identity the controller-manager's client certificate names: the user the
// API server's bootstrap RBAC policy binds the ClusterRole system:kube-controller-manager to.
const kcmUser = "system:kube-controller-manager"

// ControllerManager is a real kube-controller-manager (the kube peer's version) running only the
// controllers it was started with, against the test's control plane.
type ControllerManager struct {
	Proc        *Proc
	Controllers []string
	Kubeconfig  string
}

// StartControllerManager runs kube-controller-manager with --controllers=<controllers> (e.g.
// "resourceclaim-controller": it creates a pod's ResourceClaims from its ResourceClaimTemplates
// and writes pod.status.resourceClaimStatuses, which kube-scheduler's DynamicResources plugin
// waits for). It authenticates with a client certificate of the test's CA for
// system:kube-controller-manager and runs every controller with that one credential
// (--use-service-account-credentials=false: no serviceaccount-token controller runs to mint
// per-controller tokens); for each controller that has a bootstrap ClusterRole
// system:controller:<name> the role is bound to that user (the bootstrap policy binds those roles
// to the controllers' ServiceAccounts, which are not used here). No leader election (one
// instance), no serving (--secure-port=0: nothing here scrapes or probes it). Its log is
// LogDir/kube-controller-manager.log; it dies with the test.
//
// roles maps a controller name to its ClusterRole where the two are not spelled alike (the
// resourceclaim-controller's is system:controller:resource-claim-controller).
func (cp *ControlPlane) StartControllerManager(t testing.TB, bin string, controllers []string, roles map[string]string) *ControllerManager {
	t.Helper()
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("kube-controller-manager not found at %s: run e2e/build-peers.sh kube (a cache built before it was added gets it alone)", bin)
	}
	ctx := context.Background()
	pki := filepath.Join(cp.Dir, "pki")
	cert, key := cp.CA.Issue(t, pki, "kube-controller-manager", kcmUser, nil, nil, nil)
	kc := filepath.Join(cp.Dir, "kube-controller-manager.kubeconfig")
	WriteKubeconfig(t, kc, cp.URL, cp.CA.Path, kcmUser, &clientcmdapi.AuthInfo{ClientCertificate: cert, ClientKey: key})

	for _, c := range controllers {
		role := roles[c]
		if role == "" {
			role = "system:controller:" + c
		}
		if _, err := cp.Admin.RbacV1().ClusterRoles().Get(ctx, role, metav1.GetOptions{}); err != nil {
			t.Fatalf("controller %s: bootstrap ClusterRole %s: %v", c, role, err)
		}
		crb := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "e2e:kube-controller-manager:" + c},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: kcmUser}},
		}
		if _, err := cp.Admin.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("bind %s to %s: %v", role, kcmUser, err)
		}
	}

	p := Start(t, cp.LogDir, "kube-controller-manager", nil, bin,
		"--kubeconfig", kc,
		"--controllers", strings.Join(controllers, ","),
		"--use-service-account-credentials=false",
		"--leader-elect=false",
		"--secure-port=0",
		"--v", "2")
	// Up once it has logged each controller's start (`"Controller starting..."
	// controller="<name>"`, controllermanager.go; bounded, an exit ends the wait).
	err := Eventually(60*time.Second, 250*time.Millisecond, func() (bool, error) {
		if ok, err := p.Exited(); ok {
			return false, Permanent(fmt.Errorf("kube-controller-manager exited: %v", err))
		}
		log := p.Tail(1 << 20)
		for _, c := range controllers {
			if !strings.Contains(log, `"Controller starting..." controller="`+c+`"`) {
				return false, fmt.Errorf("controller %s not started yet", c)
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("kube-controller-manager: %v\n--- log tail:\n%s", err, p.Tail(4000))
	}
	return &ControllerManager{Proc: p, Controllers: controllers, Kubeconfig: kc}
}
