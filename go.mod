module github.com/agentrunner/runner

go 1.26.8
