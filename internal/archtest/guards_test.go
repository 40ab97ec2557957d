package archtest

import (
	"go/ast"
	"go/types"
	"slices"
	"strings"
	"testing"

	"golang.org/x/tools/go/packages"
)

// TestOptionalInterfacesGuarded: an interface of the module that code
// finds by type assertion (an optional ability: sandbox.Pauser,
// store.TurnWriter…) is one a type can stop implementing by a changed
// signature, silently: the assertion just fails and the ability is gone.
// So every type of the module that implements such an interface (test
// kits aside, and types whose package does not import the interface's:
// they match by coincidence) declares it, `var _ I = (*T)(nil)`, and the
// compiler checks it.
func TestOptionalInterfacesGuarded(t *testing.T) {
	if testing.Short() {
		t.Skip("type-checks the module")
	}
	pkgs, err := packages.Load(&packages.Config{
		Mode: packages.NeedName | packages.NeedTypes | packages.NeedSyntax | packages.NeedTypesInfo,
		Dir:  "../..",
	}, module+"/...")
	if err != nil {
		t.Fatal(err)
	}
	optional := map[*types.TypeName]bool{}
	guarded := map[[2]*types.TypeName]bool{} // (interface, type)
	var concrete []*types.TypeName
	for _, p := range pkgs {
		for _, e := range p.Errors {
			t.Fatalf("%s: %v", p.PkgPath, e)
		}
		for _, name := range p.Types.Scope().Names() {
			if tn, ok := p.Types.Scope().Lookup(name).(*types.TypeName); ok && !isKit(rel(p.PkgPath)) && !types.IsInterface(tn.Type()) {
				concrete = append(concrete, tn)
			}
		}
		for _, f := range p.Syntax {
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.TypeAssertExpr:
					if tn := moduleInterface(p.TypesInfo.TypeOf(n.Type)); tn != nil {
						optional[tn] = true
					}
				case *ast.ValueSpec:
					if len(n.Names) == 1 && n.Names[0].Name == "_" && n.Type != nil && len(n.Values) == 1 {
						iface := moduleInterface(p.TypesInfo.TypeOf(n.Type))
						typ := p.TypesInfo.TypeOf(n.Values[0])
						if ptr, ok := typ.(*types.Pointer); ok {
							typ = ptr.Elem()
						}
						if nt, ok := typ.(*types.Named); ok && iface != nil {
							guarded[[2]*types.TypeName{iface, nt.Obj()}] = true
						}
					}
				}
				return true
			})
		}
	}
	names := func(tn *types.TypeName) string { return rel(tn.Pkg().Path()) + "." + tn.Name() }
	var ifaces []*types.TypeName
	for tn := range optional {
		ifaces = append(ifaces, tn)
	}
	slices.SortFunc(ifaces, func(a, b *types.TypeName) int { return strings.Compare(names(a), names(b)) })
	impls := 0
	for _, iface := range ifaces {
		it := iface.Type().Underlying().(*types.Interface)
		for _, tn := range concrete {
			if !types.Implements(tn.Type(), it) && !types.Implements(types.NewPointer(tn.Type()), it) {
				continue
			}
			if tn.Pkg() != iface.Pkg() && !slices.Contains(tn.Pkg().Imports(), iface.Pkg()) {
				continue // by coincidence of a method: its package does not know the interface
			}
			if coincidental[names(tn)] == names(iface) {
				continue
			}
			impls++
			if !guarded[[2]*types.TypeName{iface, tn}] {
				t.Errorf("%s implements %s, which is found by type assertion, but does not say so: add var _ %s.%s = (*%s)(nil) beside it",
					names(tn), names(iface), iface.Pkg().Name(), iface.Name(), tn.Name())
			}
		}
	}
	t.Logf("%d optional interfaces found by assertion, %d implementations", len(ifaces), impls)
}

// coincidental are types that have an asserted interface's methods
// without being one of its kind.
var coincidental = map[string]string{
	"internal/runner.Service": "internal/sandbox.Readier", // its Ready serves /ready; it is no provider
}

// moduleInterface is the exported, named interface of the module that t
// is, or nil.
func moduleInterface(t types.Type) *types.TypeName {
	nt, ok := t.(*types.Named)
	if !ok || !types.IsInterface(nt) || nt.Obj().Pkg() == nil || !nt.Obj().Exported() {
		return nil
	}
	if !strings.HasPrefix(nt.Obj().Pkg().Path(), module+"/") {
		return nil
	}
	return nt.Obj()
}
