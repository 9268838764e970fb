package app

import (
	"context"
	"crypto/sha256"
	"errors"
	"os"
	"time"

	"github.com/gpuhub/gpuhub/services/internal/policy"
)

// reloadLoop reloads the configuration on SIGHUP (o.Reload) and when the file's content changes. A Kubernetes
// ConfigMap update swaps a symlink under the mounted path, which no write event on the file announces, so the
// file is polled: its hash is compared every ConfigPoll, and only a new content is decoded, so a bad file is
// reported once per change, not once per poll.
func (s *service) reloadLoop(ctx context.Context) {
	last, _ := fileHash(s.o.ConfigPath)
	t := time.NewTicker(s.o.ConfigPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.o.Reload:
			last, _ = fileHash(s.o.ConfigPath)
			s.reload("signal")
		case <-t.C:
			h, err := fileHash(s.o.ConfigPath)
			if err == nil && h == last {
				continue
			}
			if err != nil && last == ([sha256.Size]byte{}) {
				continue // still unreadable: reported when it became so
			}
			last = h
			s.reload("file changed")
		}
	}
}

// fileHash is the content hash of path; the zero hash with the error when it cannot be read.
func fileHash(path string) ([sha256.Size]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return [sha256.Size]byte{}, err
	}
	return sha256.Sum256(data), nil
}

// reload reloads the configuration: on success it is in use at once (the catalog counts free nodes with its
// tolerations); on failure the last good one stays, and the error is logged one line per problem
// (file:line:column: message), counted, and shown in /readyz.
func (s *service) reload(why string) {
	changed, err := s.cfg.Reload(s.o.Now())
	if err != nil {
		s.reloads.WithLabelValues("failure").Inc()
		s.reloadSuccess.Set(0)
		st := s.cfg.Status()
		var es policy.Errors
		if errors.As(err, &es) {
			for _, e := range es {
				s.o.Logger.Error("configuration reload failed: keeping the last good one", "why", why, "error", e.Error(),
					"loaded", st.Loaded.UTC().Format(time.RFC3339))
			}
		} else {
			s.o.Logger.Error("configuration reload failed: keeping the last good one", "why", why, "err", err,
				"loaded", st.Loaded.UTC().Format(time.RFC3339))
		}
		return
	}
	s.reloads.WithLabelValues("success").Inc()
	s.reloadSuccess.Set(1)
	if changed {
		s.cat.SetTolerations(s.config().TolerationsOrDefault())
		s.o.Logger.Info("configuration reloaded", "why", why, "path", s.o.ConfigPath)
	} else {
		s.o.Logger.Info("configuration reread: unchanged", "why", why, "path", s.o.ConfigPath)
	}
}
