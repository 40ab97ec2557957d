package config

import (
	"fmt"
	"io"
	"regexp"
	"strings"
)

//go:generate go test -run TestGeneratedDocs -update

// Reference is the settings table of docs/configuration.md: one table per
// component, in documentation order.
func Reference() string {
	var b strings.Builder
	for i, comp := range Components {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "### %s\n\n", comp)
		b.WriteString("| variable | type | default | meaning |\n|---|---|---|---|\n")
		for _, s := range byComponent(comp) {
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", s.label(), s.typeDoc(), s.defaultDoc(), s.Doc)
		}
	}
	return b.String()
}

// MainTable is the README's table of the settings most deployments set
// (Main), its links rewritten to reach docs/ from the repository's root.
func MainTable() string {
	var b strings.Builder
	b.WriteString("| variable | default | meaning |\n|---|---|---|\n")
	for _, s := range documented() {
		if s.Main {
			fmt.Fprintf(&b, "| %s | %s | %s |\n", s.label(), fromRoot(s.defaultDoc()), fromRoot(s.Doc))
		}
	}
	return b.String()
}

// WriteHelp writes the settings as `runner serve --help` shows them: by
// component, each with its default and meaning, as plain text.
func WriteHelp(w io.Writer) {
	for _, comp := range Components {
		fmt.Fprintf(w, "\n%s:\n", comp)
		for _, s := range byComponent(comp) {
			fmt.Fprintf(w, "  %s\n", plain(s.label()))
			line := plain(s.Doc)
			switch d := plain(s.defaultDoc()); {
			case d == "—":
			case strings.HasPrefix(d, "— ("):
				line += " (default: none; " + strings.TrimPrefix(d, "— (")
			default:
				line += " (default: " + d + ")"
			}
			for _, l := range wrap(line, 72) {
				fmt.Fprintf(w, "      %s\n", l)
			}
		}
	}
}

func (s *Setting) label() string {
	out := "`" + s.Name + "`"
	switch len(s.Aliases) {
	case 0:
		return out
	case 1:
		return out + " (alias `" + s.Aliases[0] + "`)"
	}
	return out + " (aliases `" + strings.Join(s.Aliases, "`, `") + "`)"
}

func (s *Setting) typeDoc() string {
	if s.Unit == "" {
		return string(s.Type)
	}
	return string(s.Type) + ", " + s.Unit
}

func (s *Setting) defaultDoc() string {
	switch {
	case s.DefaultDoc != "":
		return s.DefaultDoc
	case s.Default != "":
		return "`" + s.Default + "`"
	}
	return "—"
}

// documented is the table in documentation order: by component, then as
// listed.
func documented() []*Setting {
	var out []*Setting
	for _, comp := range Components {
		out = append(out, byComponent(comp)...)
	}
	return out
}

func byComponent(comp Component) []*Setting {
	var out []*Setting
	for i := range settings {
		if settings[i].Component == comp {
			out = append(out, &settings[i])
		}
	}
	return out
}

var mdLink = regexp.MustCompile(`\[([^\]]+)\]\(([^)]+)\)`)

// fromRoot rewrites links written for docs/ to work from the root.
func fromRoot(s string) string {
	return mdLink.ReplaceAllStringFunc(s, func(m string) string {
		sub := mdLink.FindStringSubmatch(m)
		if strings.Contains(sub[2], "://") {
			return m
		}
		return "[" + sub[1] + "](docs/" + sub[2] + ")"
	})
}

// plain is markdown as text: link targets and code quotes dropped.
func plain(s string) string {
	return strings.ReplaceAll(mdLink.ReplaceAllString(s, "$1"), "`", "")
}

func wrap(s string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		if line != "" && len(line)+1+len(w) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	return append(lines, line)
}
