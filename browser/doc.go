// Package browser holds racefree's browser tests: headless Chromium,
// driven by chromedp, uses the dashboard as a person would. It is a
// module of its own, like bench/, so that the browser driver never
// enters racefree's go.mod, and so the module graph of every program
// that uses racefree.
package browser
