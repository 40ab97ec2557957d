package kubernetes

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/agentrunner/runner/internal/logkey"
)

// podWatch is the provider's one informer on its replica's pods, started
// with the first sandbox and stopped by Provider.Close. A pod deleted out
// of band, being deleted or ended is known as soon as the API server says
// so: every Sandbox attached to it is marked lost and its port-forward
// ended. Without it a warm session reused before the runner's idle probe
// is due would run its next turn in the container the kubelet is about to
// kill, and lose that turn's files with it; with it the turn fails over to
// a new sandbox at once. Pods are matched by UID: a parked sandbox's new
// pod has the old one's name.
type podWatch struct {
	p  *Provider
	wg sync.WaitGroup // the informer's run

	// mu guards the following.
	mu       sync.Mutex
	started  bool
	closed   bool
	cancel   context.CancelFunc
	attached map[types.UID]map[*Sandbox]bool
}

// Close stops the NetworkPolicy probe if it runs and the provider's watch
// on its pods (started with its first sandbox), and waits for both. The
// sandboxes themselves are not touched: park or destroy them first.
func (p *Provider) Close() error {
	p.stopProbe()
	p.pods.close()
	return nil
}

// add registers s, attached to the pod of uid, starting the informer on
// first use. After Close it registers nothing: Probe and the daemon
// client's Gone check still ask the API server.
func (w *podWatch) add(uid types.UID, s *Sandbox) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || uid == "" {
		return
	}
	if !w.started {
		w.start()
	}
	if w.attached == nil {
		w.attached = map[types.UID]map[*Sandbox]bool{}
	}
	if w.attached[uid] == nil {
		w.attached[uid] = map[*Sandbox]bool{}
	}
	w.attached[uid][s] = true
}

// remove forgets s: its own Destroy or Pause is no loss to report.
func (w *podWatch) remove(uid types.UID, s *Sandbox) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.attached[uid], s)
	if len(w.attached[uid]) == 0 {
		delete(w.attached, uid)
	}
}

// start runs the informer (called under w.mu).
func (w *podWatch) start() {
	sel := labels.Set{labelManaged: managedBy, labelReplica: w.p.cfg.Replica}.String()
	lw := w.p.podsListWatch(func(o *metav1.ListOptions) { o.LabelSelector = sel })
	inf := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{})
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) {
			if pod, ok := obj.(*corev1.Pod); ok {
				if why := ended(pod); why != "" {
					w.lost(pod.UID, pod.Name, why)
				}
			}
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				w.lost(pod.UID, pod.Name, "was deleted")
			}
		},
	})
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel, w.started = cancel, true
	w.wg.Go(func() { inf.RunWithContext(ctx) })
}

// podsListWatch lists and watches the namespace's pods that edit selects.
func (p *Provider) podsListWatch(edit func(*metav1.ListOptions)) *cache.ListWatch {
	pods := p.client.CoreV1().Pods(p.cfg.Namespace)
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			edit(&o)
			return pods.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			edit(&o)
			return pods.Watch(ctx, o)
		},
	}
}

// ended says why pod will serve no more turns, or "".
func ended(pod *corev1.Pod) string {
	switch {
	case pod.DeletionTimestamp != nil:
		return "is being deleted"
	case pod.Status.Phase == corev1.PodFailed, pod.Status.Phase == corev1.PodSucceeded:
		return "has ended (" + string(pod.Status.Phase) + ")"
	}
	return ""
}

// lost marks every sandbox attached to pod uid lost.
func (w *podWatch) lost(uid types.UID, name, why string) {
	w.mu.Lock()
	hit := w.attached[uid]
	delete(w.attached, uid)
	w.mu.Unlock()
	if len(hit) == 0 {
		return
	}
	w.p.log.Warn("a sandbox's pod was deleted or ended out of band; its connections are closed and its session moves to a new sandbox",
		logkey.Sandbox, name, logkey.Reason, "the pod "+why)
	for s := range hit {
		s.markLost(goneErr(name, why))
	}
}

// close stops the informer and waits for it.
func (w *podWatch) close() {
	w.mu.Lock()
	w.closed = true
	cancel := w.cancel
	w.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	w.wg.Wait()
}
