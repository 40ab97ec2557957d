package daytonatest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"time"
)

// The snapshot API: POST /snapshots from a Dockerfile or an image, GET by
// id or name, Daytona's name rule and unique names (409), and the build
// state machine pending → building → active (or build_failed with an
// errorReason, when a test asked for it with FailSnapshot). Nothing is
// built: the Dockerfile is recorded for tests to read.

// SnapshotState is what a test can see of a fake snapshot.
type SnapshotState struct {
	ID         string
	Name       string
	State      string
	Dockerfile string
	ImageName  string
	CPU        int
	Memory     int
	Disk       int
	Entrypoint []string
}

type snapBox struct {
	dto    snapshotJSON
	final  string // state the build ends in
	reason string // its errorReason, shown only once the build ends
	polls  int    // GETs until it does
}

type snapshotJSON struct {
	ID             string          `json:"id"`
	OrganizationID string          `json:"organizationId"`
	General        bool            `json:"general"`
	Name           string          `json:"name"`
	ImageName      string          `json:"imageName,omitempty"`
	State          string          `json:"state"`
	ErrorReason    string          `json:"errorReason,omitempty"`
	CPU            int             `json:"cpu"`
	GPU            int             `json:"gpu"`
	Mem            int             `json:"mem"`
	Disk           int             `json:"disk"`
	Entrypoint     []string        `json:"entrypoint,omitempty"`
	BuildInfo      json.RawMessage `json:"buildInfo,omitempty"`
	CreatedAt      string          `json:"createdAt"`
}

// Daytona's IMAGE_NAME_REGEX, which it applies to snapshot names too.
var snapshotName = regexp.MustCompile(`^[a-zA-Z0-9_.\-:]+(/[a-zA-Z0-9_.\-:]+)*(@sha256:[a-f0-9]{64})?$`)

// FailSnapshot makes the build of the next snapshot named name end in
// build_failed with reason.
func (s *Server) FailSnapshot(name, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.snapFail[name] = reason
}

// Snapshot returns what the fake holds for the snapshot named name.
func (s *Server) Snapshot(name string) (SnapshotState, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range s.snapshots {
		if b.dto.Name == name {
			st := SnapshotState{ID: b.dto.ID, Name: name, State: b.dto.State, ImageName: b.dto.ImageName,
				CPU: b.dto.CPU, Memory: b.dto.Mem, Disk: b.dto.Disk, Entrypoint: b.dto.Entrypoint}
			var bi struct {
				DockerfileContent string `json:"dockerfileContent"`
			}
			_ = json.Unmarshal(b.dto.BuildInfo, &bi)
			st.Dockerfile = bi.DockerfileContent
			return st, true
		}
	}
	return SnapshotState{}, false
}

func (s *Server) createSnapshot(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name      string `json:"name"`
		ImageName string `json:"imageName"`
		BuildInfo *struct {
			DockerfileContent string   `json:"dockerfileContent"`
			ContextHashes     []string `json:"contextHashes"`
		} `json:"buildInfo"`
		CPU        int      `json:"cpu"`
		GPU        int      `json:"gpu"`
		Memory     int      `json:"memory"`
		Disk       int      `json:"disk"`
		Entrypoint []string `json:"entrypoint"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		apiError(w, r, http.StatusBadRequest, "invalid body: "+err.Error())
		return
	}
	switch {
	case !snapshotName.MatchString(req.Name):
		apiError(w, r, http.StatusBadRequest, "Invalid snapshot name format. May contain letters, digits, dots, colons, and dashes")
		return
	case req.BuildInfo == nil && req.ImageName == "":
		apiError(w, r, http.StatusBadRequest, "Must specify an image name")
		return
	case req.BuildInfo != nil && req.BuildInfo.DockerfileContent == "":
		apiError(w, r, http.StatusBadRequest, "buildInfo.dockerfileContent must not be empty")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range s.snapshots {
		if b.dto.Name == req.Name {
			apiError(w, r, http.StatusConflict, fmt.Sprintf("Snapshot with name %q already exists for this organization", req.Name))
			return
		}
	}
	dto := snapshotJSON{
		ID: newUUID(), OrganizationID: "org-fake", Name: req.Name, ImageName: req.ImageName, State: "pending",
		CPU: req.CPU, GPU: req.GPU, Mem: req.Memory, Disk: req.Disk, Entrypoint: req.Entrypoint,
		CreatedAt: time.Now().UTC().Format(time.RFC3339),
	}
	if dto.CPU == 0 {
		dto.CPU = 1
	}
	if dto.Mem == 0 {
		dto.Mem = 1
	}
	if dto.Disk == 0 {
		dto.Disk = 3
	}
	if req.BuildInfo != nil {
		dto.BuildInfo, _ = json.Marshal(req.BuildInfo)
	}
	b := &snapBox{dto: dto, final: "active", polls: s.opts.TransitionPolls}
	if reason, ok := s.snapFail[req.Name]; ok {
		delete(s.snapFail, req.Name)
		b.final, b.reason = "build_failed", reason
	}
	s.snapshots[dto.ID] = b
	writeJSON(w, http.StatusOK, b.dto)
}

func (s *Server) getSnapshot(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("id")
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.snapshots[key]
	if b == nil {
		for _, c := range s.snapshots {
			if c.dto.Name == key {
				b = c
			}
		}
	}
	if b == nil {
		apiError(w, r, http.StatusNotFound, fmt.Sprintf("Snapshot with name %s not found", key))
		return
	}
	// Each GET advances the build; with more than one poll to go, the
	// snapshot shows as building in between.
	if b.dto.State == "pending" || b.dto.State == "building" {
		b.polls--
		if b.polls <= 0 {
			b.dto.State = b.final
			if b.final == "build_failed" {
				b.dto.ErrorReason = b.reason
			}
		} else {
			b.dto.State = "building"
		}
	}
	writeJSON(w, http.StatusOK, b.dto)
}
